"""Whole networks -> Relax -> MetaSchedule tuning tasks.

The network suite is written here in plain PyTorch (torchvision does not import on the
target machines and no model zoo ships): ResNet-50, MobileNetV2 and one BERT-base encoder
layer at their real sizes, plus tiny ones for tests. Weights are seeded random, batch 1,
float32 — what matters for tuning is the operators and shapes, not the trained values.

`load_network(name_or_path)` turns a suite name (through `torch.export` and TVM's
exported-program frontend) or an `.onnx` file (TVM's ONNX frontend) into a `Network`:
the Relax module with weights bound as constants (so they fold), example inputs and a
reference callable that computes the expected outputs with PyTorch / ONNX's reference
evaluator. `extract_network_tasks` runs the pass list `compile_relax` uses, so the tasks it
finds have the same keys the compiled network later looks up in the database.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from schemas import BadInputError, RunFailure, SimoeError

if TYPE_CHECKING:
    import tvm
    from tvm.s_tir import meta_schedule as ms

SEED = 0


# --- the network suite ---------------------------------------------------------------------


class TinyMLP(nn.Module):
    """Two dense layers: the smallest network with more than one task."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(32, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


class TinyCNN(nn.Module):
    """Two convolutions, a pooling and a classifier on a 16x16 image."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.fc = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.conv1(x))
        x = torch.relu(self.conv2(x))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


def _conv_bn(cin: int, cout: int, kernel: int, stride: int = 1, groups: int = 1) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, kernel, stride, kernel // 2, groups=groups, bias=False),
        nn.BatchNorm2d(cout),
    )


class Bottleneck(nn.Module):
    """ResNet-50's block: 1x1 reduce, 3x3 (stride here, as in torchvision v1.5), 1x1 expand."""

    expansion = 4

    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        cout = width * self.expansion
        self.conv1 = _conv_bn(cin, width, 1)
        self.conv2 = _conv_bn(width, width, 3, stride)
        self.conv3 = _conv_bn(width, cout, 1)
        self.downsample = _conv_bn(cin, cout, 1, stride) if stride != 1 or cin != cout else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = torch.relu(self.conv1(x))
        out = torch.relu(self.conv2(out))
        return torch.relu(self.conv3(out) + identity)


class ResNet50(nn.Module):
    """ResNet-50 (He et al. 2016, torchvision layout): stages of 3, 4, 6, 3 bottlenecks."""

    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 64, 7, 2, 3, bias=False),
            nn.BatchNorm2d(64),
            nn.ReLU(),
            nn.MaxPool2d(3, 2, 1),
        )
        blocks: list[nn.Module] = []
        cin = 64
        for width, count, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
            for i in range(count):
                blocks.append(Bottleneck(cin, width, stride if i == 0 else 1))
                cin = width * Bottleneck.expansion
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(self.stem(x))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


class InvertedResidual(nn.Module):
    """MobileNetV2's block: 1x1 expand, 3x3 depthwise, 1x1 linear projection."""

    def __init__(self, cin: int, cout: int, stride: int, expand: int) -> None:
        super().__init__()
        hidden = cin * expand
        layers: list[nn.Module] = []
        if expand != 1:
            layers += [_conv_bn(cin, hidden, 1), nn.ReLU6()]
        layers += [_conv_bn(hidden, hidden, 3, stride, groups=hidden), nn.ReLU6()]
        layers += [_conv_bn(hidden, cout, 1)]
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x) if self.residual else self.body(x)


class MobileNetV2(nn.Module):
    """MobileNetV2 (Sandler et al. 2018), width 1.0, 224x224."""

    SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1))
    SETTINGS += ((6, 160, 3, 2), (6, 320, 1, 1))

    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        layers: list[nn.Module] = [_conv_bn(3, 32, 3, 2), nn.ReLU6()]
        cin = 32
        for expand, cout, count, stride in self.SETTINGS:
            for i in range(count):
                layers.append(InvertedResidual(cin, cout, stride if i == 0 else 1, expand))
                cin = cout
        layers += [_conv_bn(cin, 1280, 1), nn.ReLU6()]
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(1280, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.adaptive_avg_pool2d(self.features(x), 1)
        return self.classifier(torch.flatten(x, 1))


class BertLayer(nn.Module):
    """One BERT-base encoder layer (post-LayerNorm): 12-head self-attention, GELU FFN."""

    def __init__(self, hidden: int = 768, heads: int = 12, ffn: int = 3072) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.query, self.key, self.value = (nn.Linear(hidden, hidden) for _ in range(3))
        self.attn_out = nn.Linear(hidden, hidden)
        self.norm1 = nn.LayerNorm(hidden, eps=1e-12)
        self.ffn_in = nn.Linear(hidden, ffn)
        self.ffn_out = nn.Linear(ffn, hidden)
        self.norm2 = nn.LayerNorm(hidden, eps=1e-12)

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, _ = x.shape
        return x.reshape(batch, seq, self.heads, self.head_dim).permute(0, 2, 1, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, hidden = x.shape
        q, k, v = self._split(self.query(x)), self._split(self.key(x)), self._split(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        context = torch.matmul(torch.softmax(scores, dim=-1), v)
        context = context.permute(0, 2, 1, 3).reshape(batch, seq, hidden)
        x = self.norm1(x + self.attn_out(context))
        return self.norm2(x + self.ffn_out(nn.functional.gelu(self.ffn_in(x))))


class Gpt2Block(nn.Module):
    """One GPT-2-style decoder block (pre-LayerNorm, causal self-attention, tanh-GELU MLP).

    Sized like GPT-2 medium's width (1024, 16 heads) at sequence 96, so none of its
    operators has the shape of a BERT-base or a convolutional network's: the compile
    section holds it out of every model's training data (an unseen operator mix)."""

    def __init__(self, hidden: int = 1024, heads: int = 16, seq: int = 96) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.norm1, self.norm2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.fc_in, self.fc_out = nn.Linear(hidden, 4 * hidden), nn.Linear(4 * hidden, hidden)
        # the causal mask is a constant of the graph, as in GPT-2's own "bias" buffer
        mask = torch.triu(torch.full((seq, seq), float("-inf")), diagonal=1)
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, hidden = x.shape
        qkv = self.qkv(self.norm1(x)).reshape(batch, seq, 3, self.heads, self.head_dim)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim) + self.mask
        context = torch.matmul(torch.softmax(scores, dim=-1), v)
        x = x + self.proj(context.permute(0, 2, 1, 3).reshape(batch, seq, hidden))
        h = nn.functional.gelu(self.fc_in(self.norm2(x)), approximate="tanh")
        return x + self.fc_out(h)


@dataclass(frozen=True)
class SuiteEntry:
    build: Callable[[], nn.Module]
    input_shape: tuple[int, ...]
    description: str


NETWORK_SUITE: dict[str, SuiteEntry] = {
    "resnet50": SuiteEntry(ResNet50, (1, 3, 224, 224), "ResNet-50, 224x224"),
    "mobilenet_v2": SuiteEntry(MobileNetV2, (1, 3, 224, 224), "MobileNetV2 1.0, 224x224"),
    "bert_layer": SuiteEntry(BertLayer, (1, 128, 768), "one BERT-base encoder layer, seq 128"),
    "gpt2_block": SuiteEntry(
        Gpt2Block, (1, 96, 1024), "one GPT-2-style causal decoder block, width 1024, seq 96"
    ),
    "tiny_cnn": SuiteEntry(TinyCNN, (1, 3, 16, 16), "2 convs + classifier, 16x16 (tests)"),
    "tiny_mlp": SuiteEntry(TinyMLP, (4, 32), "2 dense layers (tests)"),
}


# --- loading -------------------------------------------------------------------------------


@dataclass
class Network:
    """A network ready for tuning and for checking the compiled result."""

    name: str
    mod: tvm.IRModule = field(repr=False)
    params: dict[str, Any] = field(repr=False)
    inputs: list[np.ndarray] = field(repr=False)
    reference: Callable[[list[np.ndarray]], list[np.ndarray]] = field(repr=False)
    reference_name: str = "PyTorch"


def seeded_module(name: str) -> nn.Module:
    """A suite network in eval mode with reproducible random weights (and BN statistics)."""
    entry = NETWORK_SUITE[name]
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(SEED)
    try:
        model = entry.build()
        for module in model.modules():  # non-trivial BN statistics, so BN is not an identity
            if isinstance(module, nn.BatchNorm2d):
                module.running_mean.uniform_(-0.1, 0.1)
                module.running_var.uniform_(0.5, 1.5)
    finally:
        torch.random.set_rng_state(generator_state)
    return model.eval()


def _example_input(shape: tuple[int, ...]) -> np.ndarray:
    return np.random.default_rng(SEED).standard_normal(shape).astype("float32")


def _torch_network(name: str) -> Network:
    model = seeded_module(name)
    x = _example_input(NETWORK_SUITE[name].input_shape)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch.export's own deprecations
        exported = torch.export.export(model, (torch.from_numpy(x),))
    return _exported_network(name, exported, [x], model)


def _flat_outputs(value: Any) -> list[np.ndarray]:
    if isinstance(value, torch.Tensor):
        return [value.detach().numpy()]
    if isinstance(value, (list, tuple)):
        return [o for v in value for o in _flat_outputs(v)]
    if isinstance(value, dict):
        return [o for v in value.values() for o in _flat_outputs(v)]
    raise RunFailure(f"the model returned a {type(value).__name__}, not tensors")


def _exported_network(
    name: str, exported: torch.export.ExportedProgram, inputs: list[np.ndarray], model: Any
) -> Network:
    """A `torch.export` program as a Network; `model` (called with `inputs`) is the reference."""
    from tvm.relax.frontend.torch import from_exported_program

    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        # Weights become constants in the module (keep_params_as_input=False), so they fold.
        mod = from_exported_program(exported, unwrap_unit_return_tuple=True)

    def reference(arrays: list[np.ndarray]) -> list[np.ndarray]:
        with torch.no_grad():
            return _flat_outputs(model(*(torch.from_numpy(a) for a in arrays)))

    return Network(name=name, mod=mod, params={}, inputs=inputs, reference=reference)


def _tensor_inputs(where: str, args: Any) -> list[np.ndarray]:
    """Example inputs as arrays: a tensor or a tuple/list of tensors, nothing else."""
    args = (args,) if isinstance(args, torch.Tensor) else args
    if not isinstance(args, (tuple, list)) or not args:
        raise BadInputError(f"{where}: example inputs must be a tensor or a tuple of tensors")
    if not all(isinstance(a, torch.Tensor) for a in args):
        kinds = ", ".join(type(a).__name__ for a in args)
        raise BadInputError(f"{where}: example inputs must all be tensors, got {kinds}")
    return [a.detach().cpu().contiguous().numpy() for a in args]


def _pt2_network(path: Path) -> Network:
    """A `torch.export.save`d program (`.pt2`): its graph, weights and example inputs."""
    import logging
    import zipfile

    if not zipfile.is_zipfile(path):
        raise BadInputError(f"{path}: not a torch.export program (.pt2 files are zip archives)")
    torch_log = logging.getLogger("torch.export")
    level = torch_log.level
    torch_log.setLevel(logging.CRITICAL)  # it logs a whole traceback before raising
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            exported = torch.export.load(str(path))
    except Exception as exc:  # noqa: BLE001 - a damaged archive raises many kinds
        raise BadInputError(
            f"{path}: not a loadable torch.export program ({one_line_of(exc)})"
        ) from None
    finally:
        torch_log.setLevel(level)
    example = exported.example_inputs
    if example is None:
        raise BadInputError(f"{path}: saved without example inputs; export it with them")
    args, kwargs = example
    if kwargs:
        raise BadInputError(f"{path}: keyword inputs are not supported; export positional ones")
    inputs = _tensor_inputs(str(path), args)
    return _exported_network(path.name, exported, inputs, exported.module())


FACTORY_CONTRACT = (
    "FILE.py:FUNCTION, where FUNCTION() returns (an nn.Module, a tuple of example input tensors)"
)


def _factory_network(ref: str) -> Network:
    """`path/to/file.py:factory`: the factory returns `(module, example_inputs)`.

    The module is put in eval mode and exported with `torch.export` at those inputs (static
    shapes); its outputs on them are the reference the compiled network must match.
    """
    import importlib.util

    file_name, _, func_name = ref.rpartition(":")
    path = Path(file_name)
    if not path.is_file():
        raise BadInputError(f"{ref}: no such file {file_name}")
    if not func_name.isidentifier():
        raise BadInputError(f"{ref}: expected {FACTORY_CONTRACT}")
    spec = importlib.util.spec_from_file_location(f"simoe_user_model_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise BadInputError(f"{ref}: cannot import {file_name}")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # noqa: BLE001 - whatever the user's file raises
        raise BadInputError(f"{file_name}: importing it failed ({one_line_of(exc)})") from None
    factory = getattr(module, func_name, None)
    if not callable(factory):
        raise BadInputError(f"{ref}: {file_name} has no function {func_name!r}")
    try:
        made = factory()
    except Exception as exc:  # noqa: BLE001
        raise BadInputError(f"{ref}: the factory raised ({one_line_of(exc)})") from None
    if not (isinstance(made, tuple) and len(made) == 2 and isinstance(made[0], nn.Module)):
        raise BadInputError(f"{ref}: expected {FACTORY_CONTRACT}")
    model, args = made[0].eval(), made[1]
    inputs = _tensor_inputs(ref, args)
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            exported = torch.export.export(model, tuple(torch.from_numpy(a) for a in inputs))
    except Exception as exc:  # noqa: BLE001
        raise BadInputError(f"{ref}: torch.export cannot export it ({one_line_of(exc)})") from None
    return _exported_network(f"{path.stem}:{func_name}", exported, inputs, model)


def _onnx_network(path: Path) -> Network:
    import onnx
    from onnx.reference import ReferenceEvaluator
    from tvm.relax.frontend.onnx import from_onnx

    try:
        model = onnx.load(str(path))
        onnx.checker.check_model(model)
    except Exception as exc:  # noqa: BLE001 - onnx raises many kinds for a bad file
        raise BadInputError(f"{path}: not a valid ONNX model ({one_line_of(exc)})") from None
    initializers = {init.name for init in model.graph.initializer}
    inputs: list[np.ndarray] = []
    for value in model.graph.input:
        if value.name in initializers:
            continue
        tensor_type = value.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else 0 for d in tensor_type.shape.dim]
        if any(d <= 0 for d in dims):
            raise BadInputError(f"{path}: input {value.name!r} has a dynamic shape; export static")
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor_type.elem_type)
        inputs.append(_example_input(tuple(dims)).astype(dtype))
    try:
        mod = from_onnx(model, keep_params_in_input=False)
    except Exception as exc:  # noqa: BLE001
        raise BadInputError(f"{path}: TVM cannot import it ({one_line_of(exc)})") from None
    evaluator = ReferenceEvaluator(model)
    names = [v.name for v in model.graph.input if v.name not in initializers]

    def reference(arrays: list[np.ndarray]) -> list[np.ndarray]:
        return [np.asarray(o) for o in evaluator.run(None, dict(zip(names, arrays, strict=True)))]

    return Network(
        name=path.name,
        mod=mod,
        params={},
        inputs=inputs,
        reference=reference,
        reference_name="ONNX reference evaluator",
    )


def one_line_of(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[-1] if lines else type(exc).__name__


MODEL_KINDS = "an .onnx file, a torch.export .pt2 file, FILE.py:FUNCTION or a suite name"


def is_factory_ref(ref: str) -> bool:
    """`path/to/file.py:factory` (a Python file and a function in it)."""
    head, sep, _ = ref.rpartition(":")
    return bool(sep) and head.endswith(".py")


def check_model_ref(ref: str) -> None:
    """Fail early, in one line, for a --model that names nothing loadable (nothing is run)."""
    if ref in NETWORK_SUITE:
        return
    if is_factory_ref(ref):
        if not Path(ref.rpartition(":")[0]).is_file():
            raise BadInputError(f"--model {ref!r}: no such file {ref.rpartition(':')[0]}")
        return
    path = Path(ref)
    if path.suffix.lower() in (".onnx", ".pt2") and path.is_file():
        return
    if path.is_file():
        raise BadInputError(f"--model {ref!r}: give {MODEL_KINDS}")
    known = ", ".join(NETWORK_SUITE)
    raise BadInputError(f"--model {ref!r}: no such file, and not a network ({known})")


def load_network(name_or_path: str) -> Network:
    """A suite name (`resnet50`, ...), an `.onnx` file, a `torch.export` program (`.pt2`) or
    `file.py:factory` (see `FACTORY_CONTRACT`) as a Relax `Network`."""
    if name_or_path in NETWORK_SUITE:
        try:
            return _torch_network(name_or_path)
        except BadInputError:
            raise
        except Exception as exc:  # noqa: BLE001 - torch.export / the frontend
            raise RunFailure(f"importing {name_or_path}: {one_line_of(exc)}") from exc
    if is_factory_ref(name_or_path):
        return _guarded(name_or_path, lambda: _factory_network(name_or_path))
    path = Path(name_or_path)
    suffix = path.suffix.lower()
    if suffix in (".onnx", ".pt2") or path.exists():
        if not path.is_file():
            raise BadInputError(f"{name_or_path}: no such model file")
        if suffix == ".onnx":
            return _onnx_network(path)
        if suffix == ".pt2":
            return _guarded(name_or_path, lambda: _pt2_network(path))
        raise BadInputError(f"{name_or_path}: give {MODEL_KINDS}")
    known = ", ".join(NETWORK_SUITE)
    raise BadInputError(f"unknown network {name_or_path!r}: give {MODEL_KINDS} ({known})")


def _guarded(ref: str, load: Callable[[], Network]) -> Network:
    """A user's PyTorch model that TVM's frontend cannot take is their input's problem."""
    try:
        return load()
    except SimoeError:
        raise
    except Exception as exc:  # noqa: BLE001 - TVM's torch frontend raises many kinds
        raise BadInputError(f"{ref}: TVM cannot import it ({one_line_of(exc)})") from None


# --- tasks ---------------------------------------------------------------------------------


def prepare_passes(target: tvm.target.Target) -> list[tvm.transform.Pass]:
    """The fusion passes `compile_relax` runs before it looks schedules up (same keys)."""
    from tvm import relax
    from tvm.relax import pipeline

    try:
        dispatch = list(pipeline.library_dispatch_passes(target))
    except (ValueError, AttributeError):
        dispatch = []
    return [
        *dispatch,
        relax.transform.LegalizeOps(),
        relax.transform.AnnotateTIROpPattern(),
        relax.transform.FoldConstant(),
        relax.transform.FuseOps(),
        relax.transform.FuseTIR(),
    ]


def extract_network_tasks(network: Network, target: tvm.target.Target) -> list[ms.ExtractedTask]:
    """The network's distinct fused TIR functions, each with how often it runs."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    with target, tvm.transform.PassContext(opt_level=3):
        fused = tvm.transform.Sequential(prepare_passes(target))(network.mod)
    tasks = ms.relax_integration.extract_tasks(fused, target, params=network.params or None)
    if not tasks:
        raise RunFailure(f"{network.name}: no tuning tasks found after fusion")
    return tasks
