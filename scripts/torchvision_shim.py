# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Make PyPI's torchvision importable beside a CPU-only torch.

PyPI has no CPU build of torchvision: the 0.28.0 wheel that matches torch 2.13 is linked against CUDA libraries, so
its C extension fails to load and `import torchvision` dies while registering fake kernels for the two operators
(`nms`, `qnms`) whose schema only the C extension defines. vLLM and the transformers Qwen2-VL processors need
torchvision's pure-Python parts (image transforms, the video processor class), never those C++ operators.

This module is self-contained (no `verl` imports) because `make install` copies it into the venv's site-packages
together with a `.pth` line, so the hook is active in every process of the venv: pytest, Ray workers, vLLM.
The hook is lazy: it does nothing until something imports torchvision, and nothing at all on a machine where the
C extension loads (a CUDA machine), because it only defines a schema that is missing.

    python scripts/torchvision_shim.py install   # writes the shim and its .pth into site-packages
    python scripts/torchvision_shim.py check     # imports torchvision and prints its version
"""

import os
import shutil
import sys
import sysconfig


_MODULE_NAME = "verl_torchvision_shim"
_libraries: list = []  # keeps the torch.library fragments alive


class _TorchvisionImportHook:
    """A meta-path finder that runs once, just before torchvision is first imported, and never finds anything."""

    done = False

    def find_spec(self, name: str, path=None, target=None):  # noqa: ANN001 - importlib protocol
        if name != "torchvision" or _TorchvisionImportHook.done:
            return None
        _TorchvisionImportHook.done = True
        try:
            import torch

            for op in ("nms", "qnms"):
                try:
                    torch._C._dispatch_find_schema_or_throw(f"torchvision::{op}", "")
                except RuntimeError:  # the C extension did not define it: define the schema so the import survives
                    library = torch.library.Library("torchvision", "FRAGMENT")
                    library.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
                    _libraries.append(library)
        except Exception:  # never break an import because of the shim
            pass
        return None


def install_hook() -> None:
    """Put the hook first on sys.meta_path (idempotent)."""
    if not any(isinstance(finder, _TorchvisionImportHook) for finder in sys.meta_path):
        sys.meta_path.insert(0, _TorchvisionImportHook())


def install_into_site_packages(site_packages: str | None = None) -> str:
    """Copy this file into site-packages and add a .pth line that activates the hook at interpreter start."""
    site_packages = site_packages or sysconfig.get_paths()["purelib"]
    shutil.copyfile(os.path.abspath(__file__), os.path.join(site_packages, f"{_MODULE_NAME}.py"))
    with open(os.path.join(site_packages, f"{_MODULE_NAME}.pth"), "w", encoding="utf-8") as f:
        f.write(f"import {_MODULE_NAME}; {_MODULE_NAME}.install_hook()\n")
    return site_packages


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command = argv[0] if argv else "check"
    if command == "install":
        print(f"torchvision shim installed into {install_into_site_packages()}")
        return 0
    if command == "check":
        install_hook()
        import torchvision

        print(f"torchvision {torchvision.__version__} imports")
        return 0
    print("usage: python scripts/torchvision_shim.py [install|check]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
