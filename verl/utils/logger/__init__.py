# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Metric and generation logging to the console, files, TensorBoard, Weights & Biases, SwanLab and MLflow."""

from verl.utils.logger.tracker import Tracker


__all__ = ["Tracker"]
