# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Supervised fine-tuning: its config, the worker that trains on conversations and the driver
(`python -m verl.sft.main config=examples/sft.yaml`)."""
