# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""One class per logging backend. wandb and swanlab follow their own configuration (mode variables, API keys, login)
and fall back to offline / local only without credentials, saying so; mlflow writes to a local SQLite file unless
MLFLOW_TRACKING_URI is set; TensorBoard writes event files."""

import importlib.util
import json
import logging
import netrc
import os
import posixpath
import re
from typing import Any
from urllib.parse import urlparse

from verl.utils.config import flat_config
from verl.utils.files import atomic_write, set_aside, set_aside_folder
from verl.utils.network import PROXY_VARIABLES, unreachable
from verl.utils.writable_dirs import unwritable_reason


logger = logging.getLogger(__name__)

Generation = tuple[str, str, str, float]
GENERATION_FIELDS = ("prompt", "response", "ground_truth", "score")
"""The names of a validation sample's fields (a `Generation`), in order."""


class Backend:
    """Interface: log scalars per step, log validation generations, finish."""

    def log(self, metrics: dict[str, float], step: int) -> None:
        raise NotImplementedError

    def log_generations(self, samples: list[Generation], step: int) -> None:
        pass

    def finish(self, status: str = "finished") -> None:
        """End the run as `status`: finished, failed (an error stopped it) or killed (a signal stopped it)."""


_NOT_NUMBERS: set[str] = set()
"""Metric keys already warned about for a value that is not a number."""


def _sorted_scalars(metrics: dict[str, Any]) -> dict[str, float]:
    """The metrics as floats, sorted by key; a value that is not a number (None, a list) is left out, with a warning
    once per key, instead of losing the whole step."""
    scalars = {}
    for key, value in sorted(metrics.items()):
        try:
            scalars[key] = float(value)
        except (TypeError, ValueError):
            if key not in _NOT_NUMBERS:
                _NOT_NUMBERS.add(key)
                logger.warning("Metric %r is %r, not a number: it is left out of the logs.", key, value)
    return scalars


CONSOLE_KEYS: tuple[str, ...] = tuple(
    "critic/score/mean actor/pg_loss actor/kl_loss actor/grad_norm actor/entropy_loss critic/vf_loss "
    "response_length/mean timing_s/step perf/throughput perf/mfu_actor perf/max_memory_allocated_gb "
    "train/loss train/grad_norm train/lr".split()
)
"""What the console shows of a training step; every metric goes to the other backends (the file logger keeps all)."""


def _shorten(text: Any, width: int, keep_end: bool = False) -> str:
    """`text` on one line (whitespace collapsed), cut to `width` characters at the end or, with keep_end, at the start
    (a chat prompt's question is at its end)."""
    flat = " ".join(str(text).split())
    if len(flat) <= width:
        return flat
    return "..." + flat[3 - width :] if keep_end else flat[: width - 3] + "..."


class ConsoleBackend(Backend):
    """For a person to read: one short line per step (CONSOLE_KEYS), per validation and per logged validation sample
    (shortened; the file logger keeps the whole text)."""

    def log(self, metrics: dict[str, float], step: int) -> None:
        scalars = _sorted_scalars(metrics)
        shown = [f"{key}: {scalars[key]:.4g}" for key in CONSOLE_KEYS if key in scalars]
        if shown:
            logger.info("step %d - %s", step, " - ".join(shown))
        validation = [f"{key}: {value:.4g}" for key, value in scalars.items() if key.startswith("val")]
        if validation:
            logger.info("step %d validation - %s", step, " - ".join(validation))

    def log_generations(self, samples: list[Generation], step: int) -> None:
        for index, (prompt, response, ground_truth, score) in enumerate(samples, 1):
            logger.info(
                "step %d sample %d/%d: score %.3g | prompt %s | response %s | answer %s",
                step,
                index,
                len(samples),
                score,
                _shorten(prompt, 70, keep_end=True),
                _shorten(response, 80),
                _shorten(ground_truth, 40),
            )


class FileBackend(Backend):
    """experiment_config.json, experiment_log.jsonl (a line of metrics per step) and generations.jsonl in log_dir.
    A run starts them clean: a new one (`start_step` 0) sets an earlier run's files aside (`previous_runs/<time>/`), a
    resumed one keeps the lines up to its checkpoint's step and sets the later ones aside (it redoes those steps). A
    validation-only run appends to val_only_log.jsonl and val_only_generations.jsonl (its config in
    val_only_config.json) and leaves the training run's files as they are."""

    def __init__(self, log_dir: str, config: dict[str, Any], start_step: int = 0, val_only: bool = False) -> None:
        os.makedirs(log_dir, exist_ok=True)
        prefix = "val_only_" if val_only else "experiment_"
        config_path = os.path.join(log_dir, f"{prefix}config.json")
        self.metrics_path = os.path.join(log_dir, f"{prefix}log.jsonl")
        self.generations_path = os.path.join(log_dir, f"{'val_only_' if val_only else ''}generations.jsonl")
        if not val_only:
            self._start_clean(log_dir, config_path, start_step)
        with open(config_path, "w", encoding="utf-8") as f:
            json.dump(config, f, indent=2, default=str)
        # a file a killed run (or a full disk) left with a cut last line: the next line starts on its own
        self.torn = {self.metrics_path, self.generations_path}
        logger.info("file logger: every metric in %s", self.metrics_path)

    def _start_clean(self, log_dir: str, config_path: str, start_step: int) -> None:
        logs = [path for path in (self.metrics_path, self.generations_path) if os.path.exists(path)]
        if start_step == 0:
            if any(os.path.getsize(path) for path in logs):
                folder = set_aside([*logs, config_path], log_dir)
                logger.warning(
                    "file logger: %s held an earlier run's logs; this run starts over, so they were moved to %s.",
                    log_dir,
                    folder,
                )
            return
        split = {path: _split_at_step(path, start_step) for path in logs}
        later = {path: drop for path, (_, drop) in split.items() if drop}
        if later:  # the later lines are written aside before the logs lose them (a kill in between loses none)
            folder = set_aside_folder(log_dir)
            for path, lines in later.items():
                with open(os.path.join(folder, os.path.basename(path)), "w", encoding="utf-8") as f:
                    f.writelines(lines)
            for path in later:
                atomic_write(path, lambda f, lines=split[path][0]: f.writelines(lines), sync=False)
            logger.info(
                "file logger: the run resumes after step %d; the %d line(s) of later steps (which it redoes) were "
                "moved to %s.",
                start_step,
                sum(map(len, later.values())),
                folder,
            )

    def log(self, metrics: dict[str, float], step: int) -> None:
        self._append(self.metrics_path, json.dumps({"step": step, **_sorted_scalars(metrics)}) + "\n")

    def log_generations(self, samples: list[Generation], step: int) -> None:
        if not os.path.exists(self.generations_path):  # said when written: a run without validation writes none
            logger.info("file logger: validation samples in %s", self.generations_path)
        lines = (json.dumps({"step": step, **dict(zip(GENERATION_FIELDS, sample))}) + "\n" for sample in samples)
        self._append(self.generations_path, "".join(lines))

    def _append(self, path: str, text: str) -> None:
        """Append `text` (whole lines) in one write; after a failed one, first end the cut line it may have left."""
        try:
            if path in self.torn and not _ends_a_line(path):
                text = "\n" + text
            with open(path, "a", encoding="utf-8") as f:
                f.write(text)
        except OSError:
            self.torn.add(path)
            raise
        self.torn.discard(path)


def _ends_a_line(path: str) -> bool:
    """Whether the file at `path` is missing, empty or ends with a newline."""
    try:
        with open(path, "rb") as f:
            if f.seek(0, os.SEEK_END) == 0:
                return True
            f.seek(-1, os.SEEK_END)
            return f.read(1) == b"\n"
    except FileNotFoundError:
        return True


def _split_at_step(path: str, step: int) -> tuple[list[str], list[str]]:
    """The lines of a JSONL log whose "step" is at most `step`, and the others (later steps, damaged lines)."""
    keep, drop = [], []
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if not line.strip():
                continue
            try:
                logged = json.loads(line).get("step")
            except (ValueError, AttributeError):
                logged = None
            line = line if line.endswith("\n") else line + "\n"
            (keep if isinstance(logged, int) and logged <= step else drop).append(line)
    return keep, drop


class TensorBoardBackend(Backend):
    """Event files in TENSORBOARD_DIR (default <log_dir>/tensorboard)/<project>/<experiment>. A new run hides an
    earlier run's points there, a resumed one those of the steps it redoes (TensorBoard's purge step); a
    validation-only run writes to a `val_only` run beside it."""

    def __init__(self, log_dir: str, project: str, experiment: str, start_step: int = 0, val_only: bool = False):
        from torch.utils.tensorboard import SummaryWriter

        base = os.environ.get("TENSORBOARD_DIR", os.path.join(log_dir, "tensorboard"))
        run_dir = os.path.join(base, project, experiment, *(["val_only"] if val_only else []))
        self.writer = SummaryWriter(run_dir, purge_step=None if val_only else start_step + 1 if start_step else 0)
        logger.info("tensorboard: event files in %s", self.writer.log_dir)

    def log(self, metrics: dict[str, float], step: int) -> None:
        for key, value in _sorted_scalars(metrics).items():
            self.writer.add_scalar(key, value, step)
        self.writer.flush()

    def log_generations(self, samples: list[Generation], step: int) -> None:
        text = "\n\n".join(
            f"**prompt** {p}\n\n**response** {r}\n\n**answer** {g} **score** {s}" for p, r, g, s in samples
        )
        self.writer.add_text("val/generations", text, step)

    def finish(self, status: str = "finished") -> None:
        self.writer.close()


_WANDB_URL = "https://api.wandb.ai"
_SWANLAB_URL = "https://api.swanlab.cn"


def wandb_mode() -> str:
    """WANDB_MODE if set; else online when wandb has credentials (WANDB_API_KEY, or `wandb login`'s entry for the API
    server in $NETRC or ~/.netrc: under its host and port, as wandb writes it, or its host alone), offline
    otherwise."""
    if os.environ.get("WANDB_MODE"):
        return os.environ["WANDB_MODE"]
    if os.environ.get("WANDB_API_KEY"):
        return "online"
    url = urlparse(os.environ.get("WANDB_BASE_URL", _WANDB_URL))
    try:
        entries = netrc.netrc(os.path.expanduser(os.environ["NETRC"]) if os.environ.get("NETRC") else None)
    except (OSError, netrc.NetrcParseError):
        return "offline"
    return "online" if any(entries.authenticators(host) for host in (url.netloc, url.hostname) if host) else "offline"


def swanlab_mode() -> str:
    """SWANLAB_MODE if set; else cloud when swanlab has credentials (SWANLAB_API_KEY, or `swanlab login`); else local
    where swanlab's dashboard package (swanboard, for `swanlab watch`) is installed, offline (`swanlab sync` later)
    where it is not: local mode without it logs an ImportError at the run's start."""
    if os.environ.get("SWANLAB_MODE"):
        return os.environ["SWANLAB_MODE"]
    if os.environ.get("SWANLAB_API_KEY"):
        return "cloud"
    without_key = "local" if importlib.util.find_spec("swanboard") else "offline"
    try:  # where `swanlab login` stores the key (swanlab 0.7)
        from swanlab import sdk

        return "cloud" if sdk.cmd_utils.get_nrc_path(save="root").exists() else without_key
    except Exception:  # another swanlab layout: without a key in the environment, stay on this machine
        return without_key


LOGGER_PACKAGES = {
    "tensorboard": ("tensorboard", ""),
    "wandb": ("wandb", ""),
    "swanlab": ("swanlab", ""),
    "mlflow": ("mlflow", "mlflow-skinny"),
}
"""trainer.logger entry -> (the module it imports, what pip installs it as when not the module's name)."""


def project_name_problem(logger_name: str, project: str) -> str | None:
    """Why wandb or swanlab refuses `project` as a project name (by its own check: wandb takes up to 128 characters
    without / \\ # ? % :, swanlab 1 to 100 letters, digits and _ - + .), or None."""
    try:
        if logger_name == "wandb":
            import wandb

            wandb.Settings(project=project)
        elif logger_name == "swanlab":
            from pydantic import TypeAdapter, ValidationError
            from swanlab.sdk.internal.pkg.constraints import ProjectName

            try:
                TypeAdapter(ProjectName).validate_python(project)
            except ValidationError as error:
                return error.errors()[0]["msg"]
    except ImportError:  # another layout of the package: its own start says it
        return None
    except Exception as error:  # wandb's UsageError
        return " ".join(str(error).split())
    return None


def check_logger_services(loggers: list[str], project: str | None = None) -> None:
    """Before Ray starts: each backend's package is installed, takes `project` (trainer.project_name) as a project
    name, and the folder a variable names for it is writable;
    wandb or swanlab about to log online (credentials found, no mode set) whose service cannot be
    reached is switched to offline (WANDB_MODE / SWANLAB_MODE) with a warning, instead of failing minutes later. A mode
    the user set to online explicitly is an error naming the variable."""
    for name in loggers:
        package, extra = LOGGER_PACKAGES.get(name, (None, ""))
        if package is not None and importlib.util.find_spec(package) is None:
            raise ValueError(
                f"trainer.logger has {name}, but the {package} package is not installed: pip install "
                f"'verl-compact[loggers]' (or {extra or package}), or drop {name} from trainer.logger."
            )
    for name in ("wandb", "swanlab"):  # else refused by the backend's start, once the workers had loaded the models
        problem = project_name_problem(name, project) if name in loggers and project is not None else None
        if problem is not None:
            raise ValueError(
                f"trainer.logger has {name}, which refuses trainer.project_name={project!r} as a project name "
                f"({problem}); choose another trainer.project_name, or drop {name} from trainer.logger."
            )
    for name, variable in (("tensorboard", "TENSORBOARD_DIR"), ("swanlab", "SWANLAB_DIR")):
        if name in loggers and os.environ.get(variable):
            reason = unwritable_reason(os.environ[variable])
            if reason is not None:
                raise ValueError(
                    f"trainer.logger has {name}, and {variable}={os.environ[variable]} cannot be written ({reason}); "
                    f"point {variable} at a writable folder, or unset it to log under trainer.save_checkpoint_path."
                )
    for name, variable, modes in (
        ("wandb", "WANDB_MODE", ("online", "offline", "shared", "disabled", "dryrun", "run")),
        ("swanlab", "SWANLAB_MODE", ("cloud", "online", "local", "offline", "disabled")),
    ):  # else the backend refuses it once the workers are up
        value = os.environ.get(variable)
        if name in loggers and value and value not in modes:
            raise ValueError(
                f"trainer.logger has {name}, and {variable}={value} is not one of its modes ({', '.join(modes)})."
            )
    services = [
        ("wandb", "WANDB_MODE", wandb_mode, ("online",), "WANDB_BASE_URL", _WANDB_URL),
        ("swanlab", "SWANLAB_MODE", swanlab_mode, ("cloud", "online"), "SWANLAB_API_HOST", _SWANLAB_URL),
    ]
    for name, variable, mode_of, online_modes, url_variable, default_url in services:
        if name not in loggers or mode_of() not in online_modes or any(os.environ.get(v) for v in PROXY_VARIABLES):
            continue  # (behind a proxy the client connects through it: not checked)
        problem = unreachable(os.environ.get(url_variable) or default_url)
        if problem is None:
            continue
        if os.environ.get(variable):
            raise ValueError(
                f"trainer.logger has {name} with {variable}={os.environ[variable]}, but {problem}. Fix the network "
                f"(or a proxy), set {variable}=offline to log locally and upload later, or drop {name} from "
                "trainer.logger."
            )
        os.environ[variable] = "offline"
        logger.warning(
            "%s: %s; logging offline for this run (%s=offline), upload later with `%s sync`.",
            name,
            problem,
            variable,
            name,
        )


class WandbBackend(Backend):
    """wandb in the mode its own configuration gives (see `wandb_mode`); the mode and the run's place are logged."""

    def __init__(self, log_dir: str, project: str, experiment: str, config: dict[str, Any]) -> None:
        import wandb

        os.environ.setdefault("WANDB_SILENT", "true")
        self.wandb = wandb
        mode = wandb_mode()
        self.run = wandb.init(project=project, name=experiment, config=config, dir=log_dir, mode=mode)
        if mode == "online":
            logger.info("wandb: online, run at %s", self.run.url)
        else:
            logger.info(
                "wandb: %s (no WANDB_API_KEY or `wandb login`); run files in %s, upload later with `wandb sync`.",
                mode,
                self.run.dir,
            )
        self.rows: list[list[Any]] = []

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.run.log(_sorted_scalars(metrics), step=step, commit=True)  # flush the step now, not at the next one

    def log_generations(self, samples: list[Generation], step: int) -> None:
        self.rows.extend([step, *sample] for sample in samples)
        table = self.wandb.Table(columns=["step", *GENERATION_FIELDS], data=self.rows)
        self.run.log({"val/generations": table}, step=step)

    def finish(self, status: str = "finished") -> None:
        self.run.finish(exit_code=0 if status == "finished" else 1)  # the W&B run shows as failed otherwise


class SwanlabBackend(Backend):
    def __init__(self, log_dir: str, project: str, experiment: str, config: dict[str, Any]) -> None:
        import swanlab

        self.swanlab = swanlab
        mode = swanlab_mode()
        logdir = os.environ.get("SWANLAB_DIR", os.path.join(log_dir, "swanlog"))
        self.run = swanlab.init(project=project, experiment_name=experiment, config=config, logdir=logdir, mode=mode)
        sync = ", upload later with `swanlab sync`" if mode == "offline" else ""
        logger.info("swanlab: %s mode, logs in %s%s", mode, logdir, sync)

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.swanlab.log(_sorted_scalars(metrics), step=step)

    def log_generations(self, samples: list[Generation], step: int) -> None:
        texts = [self.swanlab.Text(f"{p}\n---\n{r}\n---\n{g} (score {s})") for p, r, g, s in samples]
        self.swanlab.log({"val/generations": texts}, step=step)

    def finish(self, status: str = "finished") -> None:
        self.swanlab.finish(state={"finished": "success", "failed": "crashed"}.get(status, "aborted"))


_MLFLOW_NOT_IN_NAMES = re.compile(r"[^\w./\- :]")
"""What an MLflow metric name may not hold: it takes letters, digits, "_", "-", ".", " ", ":" and "/"."""


def mlflow_metric_name(key: str) -> str:
    """`key` as an MLflow metric name: "@" as "_at_", every other character MLflow refuses as "_", and the path
    normalised ("reward//x" -> "reward/x"), so that one reward key named freely ("acc(strict)") does not lose the
    whole step's metrics."""
    name = _MLFLOW_NOT_IN_NAMES.sub("_", key.replace("@", "_at_"))
    name = posixpath.normpath(name).lstrip("/") if name else "_"
    return "_" + name if name.startswith(".") else name


class MlflowBackend(Backend):
    """A run in MLflow's tracking store: a local SQLite file (<log_dir>/mlflow.db, artifacts in <log_dir>/mlruns)
    unless MLFLOW_TRACKING_URI is set. MLFLOW_RUN_ID continues a run: the parameters it already has are kept, and so
    are its metrics' points: a metric is not logged again at a step the run has it at (a resumed run redoes the steps
    after its checkpoint; MLflow keeps every value it is sent and cannot remove one, so they were two points a step),
    as wandb does with WANDB_RUN_ID."""

    def __init__(self, log_dir: str, project: str, experiment: str, config: dict[str, Any]) -> None:
        import mlflow

        self.mlflow = mlflow
        self.renamed: set[str] = set()
        if "MLFLOW_TRACKING_URI" not in os.environ:
            os.makedirs(log_dir, exist_ok=True)  # a local SQLite store: mlflow's plain file store is deprecated
            mlflow.set_tracking_uri("sqlite:///" + os.path.abspath(os.path.join(log_dir, "mlflow.db")))
            if mlflow.get_experiment_by_name(project) is None:  # its artifacts with the run, not in ./mlruns
                artifacts = os.path.abspath(os.path.join(log_dir, "mlruns"))
                mlflow.create_experiment(project, artifact_location=artifacts)
        mlflow.set_experiment(project)
        self.run = mlflow.start_run(run_name=experiment)
        logger.info("mlflow: run %s in %s", self.run.info.run_id, mlflow.get_tracking_uri())
        data = mlflow.get_run(self.run.info.run_id).data
        had = data.params  # a continued run's (MLFLOW_RUN_ID): not changed
        client = mlflow.tracking.MlflowClient()
        self.logged = {
            key: {point.step for point in client.get_metric_history(self.run.info.run_id, key)} for key in data.metrics
        }
        """A continued run's steps by metric name, which are not logged again."""
        self.said_logged = False
        params = {key: str(value)[:6000] for key, value in flat_config(config).items()}
        changed = sorted(key for key in params if key in had and had[key] != params[key])
        if changed:
            logger.warning(
                "mlflow: run %s keeps its parameters %s (MLflow does not change them).",
                self.run.info.run_id,
                ", ".join(changed),
            )
        mlflow.log_params({key: value for key, value in params.items() if key not in had})

    def log(self, metrics: dict[str, float], step: int) -> None:
        named = {}
        for key, value in _sorted_scalars(metrics).items():
            name = mlflow_metric_name(key)
            if name != key and "@" not in key and key not in self.renamed:
                self.renamed.add(key)
                logger.warning(
                    "mlflow: metric %r is logged as %r (MLflow names may not hold its characters).", key, name
                )
            if step in self.logged.get(name, ()):
                if not self.said_logged:
                    self.said_logged = True
                    logger.info(
                        "mlflow: run %s already has step %d of %s (this run redoes the steps after its checkpoint): "
                        "the points it has are kept, not logged again.",
                        self.run.info.run_id,
                        step,
                        name,
                    )
                continue
            named[name] = value
        if not named:
            return
        # through MLflow's own queue: a slow or unreachable tracking server (its client retries for minutes) does
        # not hold the training step; a batch it cannot log is logged as an error by MLflow
        self.mlflow.log_metrics(named, step=step, synchronous=False)

    def log_generations(self, samples: list[Generation], step: int) -> None:
        rows = [dict(zip(GENERATION_FIELDS, sample)) for sample in samples]
        self.mlflow.log_text(json.dumps(rows, indent=2), f"generations/step_{step}.json")

    def finish(self, status: str = "finished") -> None:
        self.mlflow.flush_async_logging()
        self.mlflow.end_run(status=status.upper())  # FINISHED, FAILED or KILLED, MLflow's run states
