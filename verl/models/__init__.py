# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Models: building Hugging Face models for training, their FSDP2 sharding, LoRA adapters, packed-sequence and
Ulysses attention, the multimodal rope index, and the tiny models the tests and CPU examples build offline."""
