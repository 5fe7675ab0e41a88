"""The `epcap` command line (docs/spec.md: command line). Thin: parse options, call one function, exit.

Each command's body lives in its room as `cli_<command>(...) -> int` (the exit code);
harness errors (`EpcapError`) become a one-line message on stderr and their exit code.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import click

from harness import __version__
from harness.api.registry import LAUNCHER_NAMES
from harness.errors import BadInput, EpcapError, boundary_message, harness_failure
from harness.io.boundary.streams import (
    STDOUT,
    check_stdout_open,
    flush_stdout,
    stdout_fails,
    stream_error,
    unnamed_os_error,
)
from harness.io.bounds import MAX_DECIMALS
from harness.io.redact import looks_secret, redact_text
from harness.vocab import DEFAULT_PAD_MULTIPLE, LauncherState, Stage

if TYPE_CHECKING:
    from importlib.abc import Loader  # only for hints: importlib.abc costs ~10 ms to import

STAGES = Stage.values()
PIPE_EXIT = 141                 # what a shell reports for a command killed by SIGPIPE (13)
PAD_HELP = ("Pad multiple M: a budget (capacity x N slots) must be a multiple of M slots "
            "for the capacity to be executable.")
GRID_HELP = f"Capacity grid: exact, or decimals-D (legacy: D decimals, D at most {MAX_DECIMALS})."
NO_ARGS_HELP = getattr(click.exceptions, "NoArgsIsHelpError", ())    # click >= 8.2


class PathValue(click.Path):
    """A path option or argument that refuses an option-shaped value: `run --results
    --no-such-option` would otherwise start a campaign in a folder named `--no-such-option`."""

    def convert(self, value, param, ctx):  # noqa: ANN001, ANN201 - click's signature
        if isinstance(value, str) and value.startswith("--"):
            self.fail(f"{value!r} looks like an option, not a path (write ./{value} for a "
                      "file of that name)", param, ctx)
        return super().convert(value, param, ctx)


def _call(body: Callable[..., int | None], /, **kwargs) -> None:
    """Run a command's body with kwargs; map its return and harness errors to exit codes."""
    try:
        check_stdout_open()             # `>&-`: named, not a NoneType traceback
        code = body(**kwargs)
        flush_stdout()                  # a closed pipe or a full device shows here
    except BrokenPipeError:             # the reader left (`| head`): end silently
        _quiet_pipe()
        sys.exit(PIPE_EXIT)
    except EpcapError as exc:
        _exit_on_error(exc)
    except OSError as exc:
        _exit_on_os_error(exc)
    except (UnicodeError, RecursionError, OverflowError, MemoryError) as exc:
        click.echo(f"epcap: error: {redact_text(boundary_message(exc))}", err=True)
        sys.exit(2)
    except Exception as exc:            # noqa: BLE001 - never a raw traceback (issue 41)
        failure = harness_failure(exc, None, "")
        click.echo(f"epcap: error: {redact_text(str(failure))}", err=True)
        sys.exit(failure.exit_code)
    sys.exit(code or 0)


def _exit_on_error(exc: EpcapError) -> NoReturn:
    """One `epcap: error:` line and the error's exit code (a stdout failure: quietly)."""
    click.echo(f"epcap: error: {redact_text(str(exc))}", err=True)
    if getattr(exc, "path", None) == STDOUT:
        _quiet_pipe()                   # the exit flush must not fail a second time
    sys.exit(exc.exit_code)


def _exit_on_os_error(exc: OSError) -> NoReturn:
    """An OSError as one line, exit 2: its file, else stdout when stdout is what fails (a
    full device), else an unnamed output stream."""
    message = boundary_message(exc) if exc.filename is not None else \
        str(stream_error(exc)) if stdout_fails() else unnamed_os_error(exc)
    click.echo(f"epcap: error: {redact_text(message)}", err=True)
    _quiet_pipe()
    sys.exit(2)


def refuse_secret_paths(**paths: str | None) -> None:
    """BadInput for a path the redaction pass would rewrite: paths are identity fields of
    events and cell.json, never redacted, so a token-shaped one is refused up front."""
    for option, value in paths.items():
        if value is not None and looks_secret(str(value)):
            raise BadInput("looks like a secret (a token shape or NAME=value the redaction "
                           "pass would hide); a path is never redacted, so choose another",
                           field=f"--{option}")


def _quiet_pipe() -> None:
    """stdout's reader is gone: point stdout at /dev/null so the exit flush cannot fail."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):      # AttributeError: stdout is None
        pass


def _on_broken_pipe(self) -> None:
    """rich's Console.on_broken_pipe, ours: say the pipe closed (BrokenPipeError)."""
    self.quiet = True
    raise BrokenPipeError


# Upstream facts used here: rich 15.0.0 (the venv's site-packages/rich/console.py, read
# there; github.com/Textualize/rich rich/console.py): Console.on_broken_pipe is the hook
# called on BrokenPipeError (default: dup2 /dev/null, SystemExit(1)). Python 3.11
# import protocol (docs.python.org/3.11/reference/import.html, "Finders and loaders"): a
# sys.meta_path entry needs only find_spec(name, path, target); a loader create_module(spec)
# and exec_module(module).
class _RichPolicyLoader:
    """rich.console's own loader, then the pipe policy on the module it made (a loader by
    protocol: create_module and exec_module)."""

    def __init__(self, loader: Loader) -> None:
        self.loader = loader

    def create_module(self, spec):  # noqa: ANN001, ANN201 - importlib's signature
        return self.loader.create_module(spec)

    def exec_module(self, module) -> None:  # noqa: ANN001 - importlib's signature
        self.loader.exec_module(module)
        module.Console.on_broken_pipe = _on_broken_pipe


class _RichPolicyFinder:
    """Finds nothing but rich.console, whose import it hands to the usual finders, then
    applies the pipe policy as the module loads (once: it leaves sys.meta_path). A meta-path
    finder by protocol (find_spec)."""

    def find_spec(self, name, path=None, target=None):  # noqa: ANN001, ANN201 - importlib's
        if name != "rich.console":
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.loader is not None:
            spec.loader = _RichPolicyLoader(spec.loader)
        return spec


def _rich_pipe_policy() -> None:
    """Make rich's tables report a closed pipe as BrokenPipeError (rich's documented hook,
    `Console.on_broken_pipe`, exits 1 by default), so every command ends the same way.
    Applied when rich.console is first imported, not here: importing rich costs ~17 ms of
    start-up that `epcap parse --json` (no table) never needs."""
    console = sys.modules.get("rich.console")
    if console is not None:
        console.Console.on_broken_pipe = _on_broken_pipe
    elif not any(isinstance(f, _RichPolicyFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _RichPolicyFinder())


class EpcapGroup(click.Group):
    """The `epcap` group with one error form: click's usage errors are printed as
    `epcap: error: ...` (exit 2) like every harness error, and a closed stdout pipe
    (`epcap ... | head`) ends the command silently with 141, as SIGPIPE would."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True,
             **extra):
        _rich_pipe_policy()
        try:
            try:
                code = super().main(args=args, prog_name=prog_name or "epcap",
                                    complete_var=complete_var, standalone_mode=False, **extra)
            except NO_ARGS_HELP as exc:     # bare `epcap` or `epcap GROUP`: the help, exit 0
                click.echo(exc.format_message())
                code = 0
            # only click's own output gets here (--help, --version; commands exit in _call):
            # the standard-streams rule, as for every command
            check_stdout_open()
            flush_stdout()
        except EpcapError as exc:           # stdout closed
            _exit_on_error(exc)
        except click.UsageError as exc:
            hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
            click.echo(f"epcap: error: {redact_text(exc.format_message())}{hint}", err=True)
            sys.exit(2)
        except click.ClickException as exc:
            click.echo(f"epcap: error: {redact_text(exc.format_message())}", err=True)
            sys.exit(exc.exit_code)
        except click.Abort:
            click.echo("epcap: interrupted", err=True)
            sys.exit(130)
        except BrokenPipeError:
            _quiet_pipe()
            sys.exit(PIPE_EXIT)
        except OSError as exc:              # click's output on a full device
            _exit_on_os_error(exc)
        except SystemExit as exc:
            # click's own output (--help) meeting a closed pipe: click exits 1 after wrapping
            # stdout in its flush pacifier; report it as the pipe it was
            if exc.code == 1 and type(sys.stdout).__name__ == "_PacifyFlushWrapper":
                _quiet_pipe()
                sys.exit(PIPE_EXIT)
            raise
        except Exception as exc:            # noqa: BLE001 - never a raw traceback (issue 41)
            failure = harness_failure(exc, None, "")
            click.echo(f"epcap: error: {redact_text(str(failure))}", err=True)
            sys.exit(failure.exit_code)
        if not standalone_mode:
            return code
        sys.exit(code or 0)


@click.group(cls=EpcapGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="epcap")
def main() -> None:
    """epcap: measure, round, validate and time MoE expert-parallel dispatch capacity.

    Exit codes: 0 done; 1 findings; 2 bad input or usage; 3 campaign stopped on a bug.
    """


@main.command()
@click.argument("runbook", required=False, type=PathValue(dir_okay=False))
@click.option("--results", "results", type=PathValue(file_okay=False),
              help="Results root (default: results/). The campaign writes results/<campaign>/.")
@click.option("--launcher", type=click.Choice(LAUNCHER_NAMES),
              help="Override the runbook's launcher.")
@click.option("--dry-run", is_flag=True, help="Print the plan (cells, commands, budgets); run nothing.")
@click.option("--no-test-only", "no_test_only", is_flag=True,
              help="With --dry-run and Slurm: do not ask the cluster (`sbatch --test-only`) "
                   "whether it accepts the plan's jobs (a runbook with placeholder values).")
@click.option("--fresh", is_flag=True,
              help="Start a new campaign directory instead of resuming (never overwrites).")
@click.option("--stage", "stages", multiple=True, type=click.Choice(STAGES),
              help="Run only these stages (repeatable); refuses if earlier results are missing.")
@click.option("--until", type=click.Choice(STAGES), help="Stop after this stage.")
@click.option("--model", "models", multiple=True, metavar="NAME",
              help="Run new cells only for this model (repeatable); others are replayed.")
@click.option("--backend", "backends", multiple=True, metavar="NAME",
              help="Run new cells only for this backend (repeatable); others are replayed.")
@click.option("--retry", metavar="CLASS[,CLASS...]",
              help="Re-run finished cells that failed with these classes (e.g. crash,timeout) "
                   "as new attempts.")
@click.option("--history", "history", multiple=True, type=PathValue(file_okay=False),
              metavar="DIR", help="Also learn run times from the campaigns under this results "
                                  "root (repeatable); the ETA and the dry run's estimate.")
@click.option("--publish", "publish", metavar="ORG/NAME",
              help="Publish as the campaign goes: commit each finished stage to this "
                   "HuggingFace dataset (with parent_commit; docs/publish.md). Default: the "
                   "runbook's publish.repo when publish.live is true.")
def run(runbook, results, launcher, dry_run, no_test_only, fresh, stages, until, models,
        backends, retry, history, publish) -> None:
    """Run a campaign: preflight, measure, select, validate, frontier (when the runbook asks),
    time, report.

    RUNBOOK defaults to runbooks/local-cpu.yaml. Running the same command again resumes;
    an edit of the runbook that changes no result (a comment, a limit) resumes too, and a
    result-bearing edit re-runs exactly the cells it affects.

    \b
    Example:
      epcap run runbooks/local-cpu.yaml --model QWEN3_30B --retry crash,timeout
    """
    def checked_run(**kwargs) -> int | None:
        # lazy: each command imports only its own room; inside _call, so a broken package
        # first on PYTHONPATH is one line, never a traceback (issue 41)
        refuse_secret_paths(results=kwargs["results"])
        if dry_run or stages or until or models or backends or retry:
            from harness.campaign.cli import cli_run
            return cli_run(**kwargs)
        # a plain run of a new campaign: the fork servers start importing now, beside the
        # driver's own imports (harness/campaign/warm.py); the local launcher adopts them
        from harness.campaign.warm import prestart_servers
        from harness.launch.local import release_prestarted
        try:
            prestart_servers(runbook, results, launcher)
            from harness.campaign.cli import cli_run
            return cli_run(**kwargs)
        finally:
            release_prestarted()

    _call(checked_run, runbook=runbook, results=results, launcher=launcher,
          dry_run=dry_run, fresh=fresh, stages=tuple(stages), until=until,
          models=tuple(models), backends=tuple(backends), retry=retry,
          test_only=not no_test_only, history=tuple(history), publish=publish,
          live_publisher=live_hook)


def live_hook(root: Path, repo: str, say: Callable[[str], None]) -> Callable[[str], object]:
    """`epcap run --publish`'s hook: a LivePublisher for the campaign directory (the campaign
    room does not import the publisher; this command joins them)."""
    from harness.publish.live import LivePublisher  # lazy: only live publishing needs it
    try:
        return LivePublisher(root, repo, say).publish
    except ValueError as exc:
        raise BadInput(str(exc), field="--publish") from None


@main.command()
@click.argument("results_dir", type=PathValue(file_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def status(results_dir, as_json) -> None:
    """State (running, interrupted, stopped after a stage, done), runs done / left, failures
    by class and ETA of a campaign directory, or of every campaign under a results root.

    \b
    Example:
      epcap status results/local-cpu --json
    """
    from harness.campaign.cli import cli_status  # lazy: each command imports only its own room

    _call(cli_status, results_dir=results_dir, as_json=as_json)


@main.command()
@click.option("--seq", type=int, required=True, help="Sequence length.")
@click.option("--mbs", type=int, required=True, help="Micro batch size.")
@click.option("--topk", type=int, required=True, help="Router top-k.")
@click.option("--required", type=float, help="A required capacity R (peak = ceil(R x N)).")
@click.option("--peak", type=int, help="A measured peak actual_valid_recv, in slots.")
@click.option("--check", type=str, help="Check whether capacity C is executable.")
@click.option("--pad-multiple", type=int, default=DEFAULT_PAD_MULTIPLE, show_default=True,
              help=PAD_HELP)
@click.option("--decimals", type=int, default=None,
              help=f"Legacy grid decimals-D: keep D decimals (at most {MAX_DECIMALS}).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def capacity(seq, mbs, topk, required, peak, check, pad_multiple, decimals, as_json) -> None:
    """Round a requirement onto the executable grid, or check a capacity.

    \b
    Example:
      epcap capacity --seq 4096 --mbs 1 --topk 8 --required 1.3
    """
    from harness.grid.cli import cli_capacity  # lazy: each command imports only its own room

    _call(cli_capacity, seq=seq, mbs=mbs, topk=topk, required=required,
          peak=peak, check=check, pad_multiple=pad_multiple, decimals=decimals, as_json=as_json)


@main.command()
@click.argument("logs", nargs=-1, required=True, type=PathValue(dir_okay=False))
@click.option("--warmup", type=int, default=0, show_default=True,
              help="Skip dispatch rows with iter < WARMUP.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def parse(logs, warmup, as_json) -> None:
    """Summarize dispatch telemetry of one or more logs (peak demand, saturation, malformed rows).

    Exit 1 with a note when a log holds no telemetry row (run without MOE_DROP_DEBUG=1?).

    \b
    Example:
      epcap parse results/local-cpu/cells/*__measure__*/rank0.log
    """
    from harness.telemetry.cli import cli_parse  # lazy: each command imports only its own room

    _call(cli_parse, logs=tuple(logs), warmup=warmup, as_json=as_json)


@main.command()
@click.argument("target")
@click.option("--errata", type=PathValue(dir_okay=False), help="Errata registry YAML.")
@click.option("--git-repo", "git_repos", multiple=True, metavar="NAME=PATH",
              help="A clone used for commit ancestry (repeatable).")
@click.option("--out", type=PathValue(dir_okay=False), help="Write the verdicts as TSV.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@click.option("--strict", is_flag=True, help="Exit 1 if anything is INVALID or UNKNOWN.")
@click.option("--pad-multiple", type=click.IntRange(min=1), default=DEFAULT_PAD_MULTIPLE,
              show_default=True,
              help=PAD_HELP + " The audit's rules use this one, never the upload's runbook.")
@click.option("--sample-seed", type=click.IntRange(min=0, max=2 ** 63 - 1), metavar="N",
              help="Seed of the audit's samples (routing-not-from-seed checks 64 (iteration, "
                   "layer) groups of a bigger cell). Default: drawn at audit time, so no "
                   "upload can be prepared for it; the seed is printed with every verdict "
                   "that sampled, and passing it reproduces that verdict exactly.")
@click.option("--trusted-key", "trusted_key", type=PathValue(dir_okay=False), metavar="PUBKEY",
              help="An ed25519 public key (OpenSSH or PEM) the upload's signed statement "
                   "(attestation.dsse.json) must verify with (statement-unverified).")
def audit(target, errata, git_repos, out, as_json, strict, pad_multiple, sample_seed,
          trusted_key) -> None:
    """Sort uploaded results into VALID, INVALID (with reasons) and UNKNOWN.

    \b
    Example:
      epcap audit results/local-cpu --out audit.tsv
      epcap audit results/local-cpu --sample-seed 5077410362871904243
        (the seed a verdict printed: the same samples, the same verdict)
    """
    from harness.audit.cli import cli_audit  # lazy: each command imports only its own room

    _call(cli_audit, target=target, errata=errata, git_repos=tuple(git_repos),
          out=out, as_json=as_json, strict=strict, pad_multiple=pad_multiple,
          sample_seed=sample_seed, trusted_key=trusted_key)


@main.command()
@click.argument("results_dir", type=PathValue(file_okay=False))
@click.option("--out", type=PathValue(file_okay=False), help="Output directory (default: RESULTS_DIR/report).")
def report(results_dir, out) -> None:
    """Write report.md, figures and demand.tsv for a campaign.

    \b
    Example:
      epcap report results/local-cpu && less results/local-cpu/report/report.md
    """
    from harness.report.cli import cli_report  # lazy: each command imports only its own room

    _call(cli_report, results_dir=results_dir, out=out)


@main.command()
@click.argument("results_dir", type=PathValue(file_okay=False))
@click.option("--repo", required=True, metavar="ORG/NAME", help="HuggingFace dataset repository.")
@click.option("--dry-run", is_flag=True, help="List what would be uploaded where.")
@click.option("--allow-empty", "allow_empty", is_flag=True,
              help="Publish even when nothing was measured (no pair has a selected capacity).")
@click.option("--parent-commit", "parent_commit", metavar="SHA",
              help="Commit only if the repository's head is still SHA (default: the head "
                   "read before uploading).")
@click.option("--sign-key", "sign_key", type=PathValue(dir_okay=False), metavar="PATH",
              help="An ed25519 private key (OpenSSH or PEM, no passphrase): upload a signed "
                   "in-toto statement of the evidence list beside it (attestation.dsse.json; "
                   "`epcap audit --trusted-key` verifies it). The key is never printed.")
def publish(results_dir, repo, dry_run, allow_empty, parent_commit, sign_key) -> None:
    """Audit, then upload a VALID campaign to a HuggingFace dataset under a new path.

    \b
    Example:
      epcap publish results/local-cpu --repo ORG/NAME --dry-run
    """
    from harness.publish import cli_publish  # lazy: each command imports only its own room

    _call(cli_publish, results_dir=results_dir, repo=repo, dry_run=dry_run,
          allow_empty=allow_empty, parent_commit=parent_commit, sign_key=sign_key)


@main.command()
@click.argument("cell_dirs", nargs=-1, required=True, type=PathValue())
@click.option("--runbook", type=PathValue(dir_okay=False),
              help="Take the backend's failure patterns from this runbook.")
@click.option("--backend", help="Backend name (default: cell.json's cell.backend).")
@click.option("--exit-code", "exit_code", type=int,
              help="Exit code of the run (default: cell.json's launcher.exit_code).")
@click.option("--state", type=click.Choice(LauncherState.values()),
              help="Launcher state of the run (default: cell.json's launcher.state).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@click.option("--explain", is_flag=True,
              help="Print the timeline around the decision: the deciding event, why it came "
                   "first, what was fallout or survived, and by which rule.")
def classify(cell_dirs, runbook, backend, exit_code, state, as_json, explain) -> None:
    """Re-classify finished runs: class, deciding line, first failed rank, survived warnings.

    \b
    Example:
      epcap classify results/local-cpu/cells/QWEN3_30B__echo__measure__cap2p00__a1
    """
    from harness.taxonomy.cli import cli_classify  # lazy: each command imports only its own room

    _call(cli_classify, cell_dirs=tuple(cell_dirs), runbook=runbook,
          backend=backend, exit_code=exit_code, state=state, as_json=as_json,
          explain=explain)


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@click.option("--runbook", type=PathValue(dir_okay=False),
              help="Check this node for the runbook: its Slurm gpus_per_node GPUs and its "
                   "container plugin (pyxis loaded into srun, apptainer on PATH).")
@click.option("--require-gpus", type=int, default=0, metavar="N",
              help="Fail unless N GPUs are visible (no-gpu is then a failure).")
def doctor(as_json, runbook, require_gpus) -> None:
    """Health probe: driver, idle GPUs, ECC errors (says no-gpu on a CPU machine; with
    --runbook or --require-gpus a node without the GPUs or the container plugin fails).

    \b
    Example:
      epcap doctor --json
      srun -N1 epcap doctor --runbook runbooks/tierb-b200-gbs8.yaml
    """
    from harness.health import cli_doctor  # lazy: each command imports only its own room

    def checked(as_json: bool, runbook: str | None, require_gpus: int) -> int:
        problems: list[str] = []
        if runbook:
            from harness.campaign.preflight import node_requirements  # lazy: own room
            from harness.runbook.load import load_runbook  # lazy: own room
            gpus, problems = node_requirements(load_runbook(runbook))
            require_gpus = max(require_gpus, gpus)
        return cli_doctor(as_json=as_json, require_gpus=require_gpus,
                          problems=tuple(problems))

    _call(checked, as_json=as_json, runbook=runbook, require_gpus=require_gpus)


@main.command()
@click.argument("traces", nargs=-1, required=True, type=PathValue())
@click.option("--model", help="Zoo model (runbooks/models.yaml): experts, top-k, hidden size.")
@click.option("--experts", type=int, help="Expert count (when the trace does not say it).")
@click.option("--ep", help="EP sizes, comma-separated (default: the trace's, x1/2, x2, x4).")
@click.option("--micro-batch", "micro_batch",
              help="Sequences per rank and dispatch, comma-separated (default: a whole step).")
@click.option("--placement", default="contiguous", show_default=True,
              help="contiguous, round-robin or a FILE of `EP: home ranks` lines.")
@click.option("--personality", default="raw", show_default=True,
              help="raw, echo, ultraep, moonep (comma-separated for several).")
@click.option("--pad-multiple", type=int, default=DEFAULT_PAD_MULTIPLE, show_default=True,
              help=PAD_HELP)
@click.option("--grid", default="exact", show_default=True, help=GRID_HELP)
@click.option("--unit", default="slots", show_default=True, help="slots or tokens.")
@click.option("--seq", type=int, help="Sequence length of the trace (for --micro-batch).")
@click.option("--out", type=PathValue(file_okay=False),
              help="Write forecast.tsv and forecast.png here.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def forecast(traces, model, experts, ep, micro_batch, placement, personality, pad_multiple,
             grid, unit, seq, out, as_json) -> None:
    """Capacity at other EP sizes, micro-batches and placements from recorded routing.

    TRACE is an epcap routing trace or Megatron-LM router-trace JSONL
    (router_trace_rank{N}.jsonl files or their directory). See docs/forecast.md.

    \b
    Example:
      epcap forecast router_trace/ --model QWEN3_30B --ep 8,16 --grid decimals-2
    """
    from harness.forecast.cli import cli_forecast  # lazy: each command imports only its own room

    _call(cli_forecast, traces=tuple(traces), model=model,
          experts=experts, ep=ep, micro_batch=micro_batch, placement=placement,
          personality=personality, pad_multiple=pad_multiple, grid=grid, unit=unit,
          out=out, as_json=as_json, seq=seq)


if __name__ == "__main__":
    main()
