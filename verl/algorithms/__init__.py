# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The RL math, pure torch on (batch, response length) tensors: advantage estimators, policy and value losses, KL
estimators and controllers, masked statistics and loss aggregation, and the schedules of response length and entropy.
Workers and the driver both import it; it imports nothing of the trainer."""
