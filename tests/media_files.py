# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Media files the tests write themselves: short video clips of known frames."""

from fractions import Fraction

import av
import numpy as np


def write_video(
    path: str, num_frames: int = 8, rate: int = 4, size: tuple[int, int] = (64, 48), start_frame: int = 0
) -> str:
    """An mpeg4 clip whose frame i is filled with the gray level 15 * i (rate frames per second), its first frame at
    time start_frame / rate (a clip cut from a longer recording keeps its timestamps); returns `path`."""
    with av.open(path, "w") as container:
        stream = container.add_stream("mpeg4", rate=rate)
        stream.width, stream.height, stream.pix_fmt = size[0], size[1], "yuv420p"
        for i in range(num_frames):
            frame = av.VideoFrame.from_ndarray(np.full((size[1], size[0], 3), 15 * i, np.uint8), format="rgb24")
            if start_frame:
                frame.pts, frame.time_base = start_frame + i, Fraction(1, rate)
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path
