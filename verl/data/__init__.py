# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Data: datasets of prompts (RL) and conversations (SFT), their sources (files, Hugging Face datasets), images and
videos, and the tokenizer and processor."""
