"""Real training records from QNN's HTP simulator: mutants of ExecuTorch's QNN op builders,
lowered to HTP and run on x86, and runs in a broken QNN SDK; what QNN and ExecuTorch printed
becomes a corpus record.

    QNN_SDK_ROOT=... LD_LIBRARY_PATH=$QNN_SDK_ROOT/lib/x86_64-linux-clang \\
    .venv/bin/python scripts/qnn_records.py [--part sdk|builders] [--per-module 4] [--seed 0]
        [--out tests/engine/corpus/untrained/qnn_simulator_of_executorch.jsonl]

Op builders (`backends/qualcomm/builders/op_*.py`) turn each edge op into QNN op wrappers:
tensors, parameters, axes. A mutant of one (one small change: bench/mutants.py) is lowered with
the small models below that run its lines, in a forked child: QNN either rejects what the
builder made (its own `<E>` lines and ExecuTorch's exception), the builder itself raises, or
the graph fails on the simulator. Each such failure is a record labelled
`qnn_op_validation` (by where the fault is: an operator QNN could not validate or build); a
mutant that only changes the numbers is no record. The excerpt is what a user's terminal shows:
QNN's error lines, then the traceback's tail (from ExecuTorch's first frame), with this
machine's paths made general.

The SDK cases run a lowering in a subprocess against a copy of the SDK folder with one thing
broken (a library missing, a dependency not on the loader path, another QAIRT release): each
failure is a `qnn_sdk_or_toolchain` record. A case that does not fail is no record; nor is a
crash (that is a runtime error, whatever broke).

Records' sources are the mutated builders and the SDK's library folder, never a thread of the
evaluation split (such a record is dropped); a record's note names this script and what broke.
They are written to `corpus/untrained/`, which training does not read: trained on, they raised
grouped CV but cost a multi-method record of the evaluation split (docs/ENGINE.md).
"""
from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import traceback
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

from bench.mutants import candidates  # noqa: E402
from mutant_records import compiling, general, load_executorch, patch_module, run_forked, write_records  # noqa: E402
from triage_rules.corpus import EVAL_FILE, load_corpus, thread_of  # noqa: E402
from tasks.qnn import sdk as sdk_module  # noqa: E402
from tasks.qnn.htp import NativeLog  # noqa: E402
from triage_rules.roots import shape  # noqa: E402

OUT = REPO / "tests" / "engine" / "corpus" / "untrained" / "qnn_simulator_of_executorch.jsonl"
BUILDERS = "backends/qualcomm/builders"
SDK_PATH = "/opt/qcom/aistack/qairt/2.49.40.260810"  # where the SDK sits on a user's machine
MAX_LINES = 38  # an excerpt is 2 to 40 lines (the corpus's rule)
NATIVE_LINES = 8  # QNN's own error lines kept before the traceback
MODELS_PER_MUTANT = 2
PER_MUTANT = 1  # records of one mutant: its first failure
CHILD_TIMEOUT = 180
ATOL = 5e-2  # fp16 on HTP
_EXCEPTION = re.compile(r"^(?:[\w.]+\.)?\w*(?:Error|Exception|Violation\w*|Failure|Exit|Interrupt)\b")
_MACHINE_PATH = re.compile(r"/(?:work|root|tmp)/")
# a mutant that leaves a name unbound fails as a linter would catch it before any test: no record
_LINT_CATCHES = re.compile(r"^(?:NameError|UnboundLocalError)\b")


# -- the models: small graphs whose ops cover many builders ---------------------------------
def _models():
    import torch
    from torch import nn

    F = nn.functional

    class Vision(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(4, 8, 3, padding=1)
            self.bn = nn.BatchNorm2d(8)
            self.lin = nn.Linear(6, 5)
            self.ln = nn.LayerNorm(5)

        def forward(self, x):
            y = F.max_pool2d(torch.relu(self.bn(self.conv(x))), 2, 2)
            y = torch.cat([y, F.avg_pool2d(y, 1, 1) * 2], dim=1)
            y = self.lin(y.reshape(1, 16, -1)[:, :, :6])
            return torch.softmax(self.ln(F.gelu(y)).transpose(1, 2), -1).mean(1)

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(32, 16)
            self.qkv = nn.Linear(16, 48)
            self.out = nn.Linear(16, 16)

        def forward(self, tokens):
            h = self.emb(tokens)
            h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
            q, k, v = self.qkv(h).split(16, dim=-1)
            q, k, v = (t.view(1, 6, 2, 8).permute(0, 2, 1, 3) for t in (q, k, v))
            scores = torch.matmul(q, k.transpose(-1, -2)) / 8 ** 0.5
            a = torch.matmul(torch.softmax(scores, dim=-1), v)
            return self.out(a.permute(0, 2, 1, 3).reshape(1, 6, 16)) + torch.sigmoid(h)

    class Elementwise(nn.Module):
        def forward(self, x, y):
            a = torch.abs(x - y) + torch.exp(-x.abs())
            b = torch.sqrt(a) * torch.tanh(y) - torch.clamp(x, -0.5, 0.5)
            c = torch.where(x > y, F.hardswish(a), F.hardsigmoid(b))
            return torch.maximum(c, torch.minimum(a, b)) + torch.log(a + 1) + torch.neg(torch.sin(y))

    class Layout(nn.Module):
        def forward(self, x):
            p = F.pad(x, (1, 1, 0, 0))
            s = p.unsqueeze(0).squeeze(0)[:, 1:5]
            parts = torch.split(s, 2, dim=1)
            st = torch.stack(parts, dim=0).sum(0)
            e = st[:, :1].expand(2, 2, 8)
            r = st.repeat(1, 1, 2)[:, :, :8]
            sel = torch.index_select(r, 2, torch.tensor([0, 2, 4, 6]))
            g = torch.gather(sel, 2, torch.tensor([[[3, 1, 0, 2]] * 2] * 2))
            return torch.cat([torch.flip(g, [2]), e[:, :, :4], torch.cumsum(g, 2)], dim=1).select(0, 1)

    class Image(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(4, 8, 1)
            self.gn = nn.GroupNorm(2, 8)
            self.prelu = nn.PReLU(8)

        def forward(self, x):
            y = self.prelu(self.gn(self.conv(x)))
            y = F.adaptive_avg_pool2d(y, (2, 3))
            y = F.interpolate(y, scale_factor=2, mode="nearest") + F.interpolate(y, size=(4, 6), mode="bilinear")
            return F.pixel_shuffle(y, 2).amax(dim=1)

    torch.manual_seed(0)
    return {
        "vision": (Vision, (torch.randn(1, 4, 8, 12),)),
        "attention": (Attention, (torch.tensor([[1, 5, 9, 3, 7, 2]]),)),
        "elementwise": (Elementwise, (torch.randn(2, 3, 8), torch.randn(2, 3, 8))),
        "layout": (Layout, (torch.randn(2, 6, 6),)),
        "image": (Image, (torch.randn(1, 4, 6, 9),)),
    }


def _quiet() -> None:
    """A child's own output goes nowhere (what matters comes back as its result)."""
    sink = os.open(os.devnull, os.O_WRONLY)
    os.dup2(sink, 1)
    os.dup2(sink, 2)
    os.close(sink)


def lower_and_run(name: str) -> dict:
    """Lower model `name` to HTP and run it on the simulator: the stage that failed ("lower",
    "run", "numbers" or "" when none), the exception's formatted lines, QNN's error lines."""
    import torch

    from tasks.probes.runtime import LoadedProgram, to_pte
    from tasks.qnn import htp

    cls, inputs = _models()[name]
    torch.manual_seed(1)
    model = cls().eval()
    with torch.no_grad():
        expected = model(*inputs)
    stage, lines = "lower", []
    with htp.native_log() as log:
        try:
            program, pte = to_pte(htp.lower(model, inputs))
            stage = "run"
            got = LoadedProgram(pte).run("forward", inputs)
            stage = "numbers"
            if htp.delegate_ids(program) and not torch.allclose(got[0], expected, atol=ATOL, rtol=ATOL):
                raise AssertionError("outputs differ")  # no record: wrong numbers, not a rejected op
            stage = ""
        except Exception as exc:  # noqa: BLE001 - every failure of the lowering is data here
            lines = "".join(traceback.format_exception(exc)).splitlines()
    return {"stage": stage, "traceback": lines, "native": log.errors}


def traced(run, wanted) -> dict:
    """`run()`'s result and the lines it ran of the files `wanted(filename)` accepts."""
    covered: dict[str, set[int]] = {}

    def local(frame, event, arg):
        if event == "line":
            covered.setdefault(frame.f_code.co_filename, set()).add(frame.f_lineno)
        return local

    def tracer(frame, event, arg):
        return local if wanted(frame.f_code.co_filename) else None

    sys.settrace(tracer)
    try:
        result = run()
    finally:
        sys.settrace(None)
    return {"result": result, "covered": {f: sorted(lines) for f, lines in covered.items()}}


def coverage(name: str, builders: str) -> dict:
    """Lines of the builders' files that lowering `name` ran (unmutated), and its result."""
    return traced(lambda: lower_and_run(name), lambda filename: filename.startswith(builders))


# -- excerpts ---------------------------------------------------------------------------------
def _general(line: str, installed: Path, sdk: str) -> str:
    return general(line.replace(sdk, SDK_PATH), installed) if sdk else general(line, installed)


def _without_own_frames(tb: list[str]) -> list[str]:
    """The traceback less the frames of this repository (the script and the probes that drove the
    lowering; a chained exception's second traceback starts with them) and their source lines:
    a user's terminal shows their own code there, not etriage's. Its venv (the installed
    ExecuTorch and torch, often inside the repository) is not etriage's code."""
    out, own = [], False
    for line in tb:
        if line.startswith('  File "'):
            own = line.startswith(f'  File "{REPO}/') and not line.startswith(f'  File "{sys.prefix}/')
        elif not line.startswith("    "):
            own = False
        if not own:
            out.append(line)
    return out


def excerpt_of(native: list[str], tb: list[str], installed: Path, sdk: str = "") -> tuple[str, str] | None:
    """(excerpt, failure line): QNN's last error lines, then the traceback from ExecuTorch's first
    frame (its tail when long), paths made general; None without an exception line or when a
    path of this machine is left."""
    tb = _without_own_frames([line.rstrip() for line in tb if line.strip()])
    first = next((i for i, line in enumerate(tb) if line.startswith(f'  File "{installed}/')), None)
    if first is None:  # nothing of ExecuTorch failed
        return None
    body = [_general(line, installed, sdk) for line in tb[first:]]
    exceptions = [line for line in body if _EXCEPTION.match(line)]
    if not exceptions:
        return None
    native = [_general(line, installed, sdk) for line in dict.fromkeys(native)][-NATIVE_LINES:]
    room = MAX_LINES - len(native) - 1
    if len(body) > room:
        body = body[-room:]
        while body and not body[0].startswith('  File "'):
            body.pop(0)
    lines = native + ["Traceback (most recent call last):"] + body
    text = "\n".join(lines)
    if _MACHINE_PATH.search(text) or exceptions[-1] not in lines:
        return None
    return text, exceptions[-1]


# -- mutants of the builders ------------------------------------------------------------------
def builder_records(per_module: int, seed: int, installed: Path, version: str, only: str | None = None,
                    models: list[str] | None = None) -> list[dict]:
    import_qualcomm()
    builders = str(installed / BUILDERS)
    models = models or sorted(_models())
    runs = {}
    for name in models:
        run = run_forked(lambda name=name: (_quiet(), coverage(name, builders))[1], timeout=CHILD_TIMEOUT)
        if run is None or run["result"]["stage"]:
            stage = run and run["result"]["stage"]
            print(f"  model {name}: fails unmutated ({stage or 'crashed'}); not used", flush=True)
            continue
        runs[name] = {f: set(lines) for f, lines in run["covered"].items()}
        print(f"  model {name}: lowers and runs; {len(runs[name])} builder file(s)", flush=True)
    files = sorted({f for covered in runs.values() for f in covered if Path(f).name.startswith("op_")})
    out: list[dict] = []
    for filename in files:
        path = str(Path(filename).relative_to(installed))
        if only and only not in path:
            continue
        source = Path(filename).read_text(encoding="utf-8")
        # every builder's __init__ runs when the backend registers its visitors: not the op's use
        chosen = [m for m in candidates(source, path) if not m.function.endswith("__init__")
                  and any(line in covered.get(filename, ()) for covered in runs.values() for line in m.lines)]
        random.Random(f"{seed}:{path}").shuffle(chosen)  # a module's mutants whichever others run
        shapes: Counter[str] = Counter()
        tried = made = 0
        for mutant, mutated in compiling(chosen, source, per_module):
            tried += 1
            using = [n for n in runs if any(line in runs[n].get(filename, ()) for line in mutant.lines)]
            using = using[:MODELS_PER_MUTANT]

            def work(mutated=mutated, using=using):
                _quiet()
                patch_module(filename, source, mutated)
                return [lower_and_run(n) for n in using]
            results = run_forked(work, timeout=CHILD_TIMEOUT)
            if results is None:
                print(f"  {mutant.key}: crashed or hung", flush=True)
                continue
            kept = 0
            for name, result in zip(using, results):
                if result["stage"] in ("", "numbers") or kept >= PER_MUTANT:
                    continue
                excerpt = kept_excerpt(result, installed, shapes, per_shape=1)
                if excerpt is None:
                    continue
                kept += 1
                out.append(builder_record(path, mutant, name, result["stage"], excerpt, version))
            made += kept
            print(f"  {mutant.key}: {[r['stage'] or 'ok' for r in results]}, {kept} kept", flush=True)
        print(f"{path}: {made} record(s) of {tried} mutant(s)", flush=True)
    return out


def kept_excerpt(result: dict, installed: Path, shapes: Counter[str], per_shape: int) -> tuple[str, str] | None:
    """The excerpt of a failed run worth a record: ExecuTorch's frames in it, not what a linter
    catches first, and its message's shape seen fewer than `per_shape` times (counted in `shapes`)."""
    excerpt = excerpt_of(result["native"], result["traceback"], installed, os.environ["QNN_SDK_ROOT"])
    if excerpt is None or _LINT_CATCHES.match(excerpt[1]):
        return None
    key = shape(excerpt[1])
    if shapes[key] >= per_shape:
        return None
    shapes[key] += 1
    return excerpt


def builder_record(path: str, mutant, model: str, stage: str, excerpt: tuple[str, str], version: str) -> dict:
    return mutant_record("qnn_records", "gen-qnn", "QNN op builders", path, mutant, model, version,
                         "qnn_op_validation", excerpt, f"lowering the '{model}' model to HTP (SM8650, fp16) failed at "
                         f"its {stage} (it passes unmutated)")


def mutant_record(script: str, prefix: str, what: str, path: str, mutant, run: str, version: str, category: str,
                  excerpt: tuple[str, str], how: str) -> dict:
    """A corpus record of what a mutant of executorch/`path` made fail in `run` (a model, a flow)."""
    first, column = mutant.edits[0][:2]
    return {
        "id": f"{prefix}-{Path(path).stem}-{first}-{column}-{mutant.operator}-{run}"[:120],
        "source": f"https://github.com/pytorch/executorch/blob/v{version}/{path}",
        "origin": f"generated: QNN HTP simulator on a mutant of ExecuTorch's {what}",
        "excerpt": excerpt[0], "failure_line": excerpt[1], "category": category,
        "note": (f"scripts/{script}.py: bench/mutants.py {mutant.operator} mutant of executorch/{path} "
                 f"{mutant.description} (in {mutant.function}) on the installed executorch {version}; {how}"),
    }


def import_qualcomm() -> None:
    """The parent holds the QNN backend and every builder the children will swap."""
    from tasks.qnn import htp

    htp.require_sdk()
    htp._qualcomm("utils.utils")
    htp._qualcomm("builders")


# -- a broken SDK -----------------------------------------------------------------------------
# (name, what breaks, the library folder's change): each runs the lowering in a subprocess
SDK_CASES = (
    ("htp-missing", "libQnnHtp.so is not in the SDK", {"remove": ["libQnnHtp.so"]}),
    ("system-missing", "libQnnSystem.so is not in the SDK", {"remove": ["libQnnSystem.so"]}),
    ("libcxx-missing", "the libc++ libQnnHtp.so links is not on the loader path", {"remove_glob": ["libc++-*"]}),
    ("other-qairt", "the SDK is QAIRT 2.48.40 (onnxruntime-qnn 2.4.0), whose HTP device config layout "
     "ExecuTorch 1.4.1 does not match", {"wheel": "2.4.0"}),
)
# other onnxruntime-qnn wheels a case lays out instead of the provisioned libraries (pinned)
OTHER_WHEELS = {"2.4.0": "4c0061ac12d0936f98fe252a24099e6db6fffa62c14fa9c725e001a4147471ee"}
_CHILD = """
import sys, torch
sys.path.insert(0, {repo!r})
from tasks.probes.runtime import to_pte
from tasks.qnn import htp
class AddRelu(torch.nn.Module):
    def forward(self, x, y):
        return torch.relu(x + y) * 2
inputs = (torch.randn(1, 8), torch.randn(1, 8))
program, pte = to_pte(htp.lower(AddRelu().eval(), inputs))
from tasks.probes.runtime import LoadedProgram
LoadedProgram(pte).run("forward", inputs)
"""


def other_wheel(version: str) -> Path:
    """onnxruntime-qnn `version`'s wheel, from PyPI once into ~/.cache/etriage, checked by sha256."""
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "etriage" / "qnn-wheels"
    wheel = next(iter(cache.glob(f"onnxruntime_qnn-{version}-*.whl")), None)
    if wheel is None:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                        "--disable-pip-version-check", "--dest", str(cache), f"onnxruntime-qnn=={version}"],
                       check=True, capture_output=True, timeout=900)
        wheel = next(iter(cache.glob(f"onnxruntime_qnn-{version}-*.whl")))
    if sdk_module.sha256_of(wheel) != OTHER_WHEELS[version]:
        raise SystemExit(f"qnn_records: {wheel} is not the pinned onnxruntime-qnn {version} (sha256 differs)")
    return wheel


def sdk_records(installed: Path, version: str, only: list[str] | None = None) -> list[dict]:
    sdk = Path(os.environ["QNN_SDK_ROOT"]).resolve()
    libs = sdk / "lib" / "x86_64-linux-clang"
    out = []
    for name, what, change in SDK_CASES:
        if only and name not in only:
            continue
        with tempfile.TemporaryDirectory(prefix="etriage-qnn-sdk-") as scratch:
            root = Path(scratch) / "qairt"
            broken = root / "lib" / "x86_64-linux-clang"
            if "wheel" in change:
                sdk_module.lay_out(other_wheel(change["wheel"]), root)
            else:
                shutil.copytree(libs, broken)
            for lib in change.get("remove", []):
                (broken / lib).unlink()
            for pattern in change.get("remove_glob", []):
                for lib in broken.glob(pattern):
                    lib.unlink()
            env = {**os.environ, "QNN_SDK_ROOT": str(root), "LD_LIBRARY_PATH": str(broken), "OMP_NUM_THREADS": "1"}
            done = subprocess.run([sys.executable, "-c", _CHILD.format(repo=str(REPO))], env=env, capture_output=True,
                                  text=True, errors="replace", timeout=CHILD_TIMEOUT)
        if done.returncode == 0:
            print(f"  sdk {name}: no failure; no record", flush=True)
            continue
        printed = (done.stdout + "\n" + done.stderr).splitlines()
        start = max((i for i, line in enumerate(printed) if line.startswith("Traceback (most recent call last)")),
                    default=None)
        log = NativeLog()  # QNN's and the delegate's error lines, as the probes quote them
        log.read("\n".join(printed[:start]))
        native = log.errors
        tb = printed[start:] if start is not None else []
        excerpt = excerpt_of(native, tb, installed, str(root))
        if excerpt is None:
            print(f"  sdk {name}: exit {done.returncode} without a usable traceback; no record", flush=True)
            continue
        print(f"  sdk {name}: {excerpt[1][:120]}", flush=True)
        out.append({
            "id": f"gen-qnn-sdk-{name}",
            "source": f"https://github.com/pytorch/executorch/blob/v{version}/backends/qualcomm/runtime/backends/QnnImplementation.cpp",
            "origin": "generated: QNN HTP lowering against a broken copy of the QNN SDK",
            "excerpt": excerpt[0], "failure_line": excerpt[1], "category": "qnn_sdk_or_toolchain",
            "note": (f"scripts/qnn_records.py: tasks/qnn/htp.py lowering a 2-input add/relu model to HTP with the "
                     f"installed executorch {version} failed so, against a copy of the provisioned SDK (QAIRT "
                     f"2.49.40, onnxruntime-qnn 2.5.0) where {what}"),
        })
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-module", type=int, default=4, help="mutants tried per builder module")
    parser.add_argument("--module", help="only builder modules whose path contains this")
    parser.add_argument("--model", action="append", choices=("attention", "elementwise", "image", "layout", "vision"),
                        help="lower only these models (default: all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--part", action="append", choices=("sdk", "builders"),
                        help="the broken-SDK cases or the builders' mutants (default: both)")
    parser.add_argument("--sdk-case", action="append", choices=[case[0] for case in SDK_CASES],
                        help="only these broken-SDK cases (default: all)")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    if not os.environ.get("QNN_SDK_ROOT"):
        print("qnn_records: QNN_SDK_ROOT is not set (make install provisions .venv/qnn-sdk)", file=sys.stderr)
        return 2
    installed, version = load_executorch()
    parts = args.part or ["sdk", "builders"]
    records = sdk_records(installed, version, args.sdk_case) if "sdk" in parts else []
    if "builders" in parts:
        records += builder_records(args.per_module, args.seed, installed, version, args.module, args.model)
    write_unseen(records, args.out)
    return 0


def write_unseen(records: list[dict], out: Path) -> list[dict]:
    """The records less any of the evaluation split's threads, written to `out`."""
    held_out = {r.thread for r in load_corpus(EVAL_FILE)}
    kept = [r for r in records if thread_of(r["source"]) not in held_out]
    if len(kept) < len(records):
        print(f"{len(records) - len(kept)} record(s) of the evaluation split's threads dropped", flush=True)
    write_records(kept, out)
    return kept


if __name__ == "__main__":
    sys.exit(main())
