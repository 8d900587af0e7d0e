"""LiteRT (TensorFlow Lite), the other on-device runtime: convert with litert-torch, load, run.

`litert_torch.convert` turns a module (an ExportedProgram's, stock or rewritten by phaseconv) into a
`.tflite` flatbuffer; LiteRT's interpreter runs it on its XNNPACK delegate with `threads` threads.
litert-torch and ai-edge-litert are optional: `pip install 'phaseconv[litert]'`.

A program that keeps state (a streaming step) is converted as `explicit_state` writes it (LiteRT,
like ONNX, has no state between calls, and litert-torch drops buffer writes): signature
"serving_default" takes the model's inputs then the state, and returns its outputs then the next
state; signature "initial_state" takes nothing and returns the state before the first call.

int8 (`calibration` given): litert-torch's own PT2E quantizer, static, symmetric, int8 weights per
output channel, scales from the calibration inputs. The model's inputs and outputs become int8
tensors there; `LiteRTSession` quantizes and dequantizes them with the model's own scales.
"""

from __future__ import annotations

import os
from functools import partial

import torch
from torch import nn
from torch.export import ExportedProgram

from phaseconv.errors import PhaseconvError, known_cause, parked_stderr

SERVING, INITIAL = "serving_default", "initial_state"


def require_litert():
    """litert_torch and ai_edge_litert's interpreter, imported quietly (a clear message if missing)."""
    os.environ.setdefault("LITERT_TORCH_SHOW_PROGRESS", "n")  # its per-pass progress lines
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    try:
        with parked_stderr():  # TensorFlow's and absl's start-up chatter
            import litert_torch
            from ai_edge_litert.interpreter import Interpreter
    except ImportError:
        raise PhaseconvError(
            "litert-torch is not installed: LiteRT export and its interpreter need pip install 'phaseconv[litert]'"
        ) from None
    return litert_torch, Interpreter


class _InitialState(nn.Module):
    """() -> the state before the first call, as constants."""

    def __init__(self, initial: tuple[torch.Tensor, ...]):
        super().__init__()
        for index, value in enumerate(initial):
            self.register_buffer(f"state_{index}", value.clone())

    def forward(self):
        return tuple(buffer.clone() for buffer in self.buffers())


def to_tflite(ep: ExportedProgram, calibration=None) -> bytes:
    """The LiteRT model (a .tflite flatbuffer) of `ep` at its example input sizes, by litert-torch;
    a stateful program with the signatures the module docstring gives; int8 when `calibration`
    (input tuples, or one tuple) is given."""
    from phaseconv.graph.program import user_input_nodes
    from phaseconv.graph.state import explicit_state
    from phaseconv.quantize import input_sets, require_matching_inputs

    litert_torch, _ = require_litert()
    program, state = explicit_state(ep)
    values = [node.meta["val"] for node in user_input_nodes(program)]
    if not all(isinstance(size, int) for value in values for size in value.shape):
        raise PhaseconvError("LiteRT export takes a program of static sizes: export it for one length")
    examples = tuple(torch.zeros(value.shape, dtype=value.dtype) for value in values)
    if calibration is not None:
        if state is not None:
            raise PhaseconvError("int8 LiteRT export takes a program without state: its state would be int8 too")
        sets = input_sets(calibration)
        require_matching_inputs(ep, sets)
        try:
            module, config = _int8_module(ep, sets)
            with parked_stderr():
                return litert_torch.convert(module, examples, quant_config=config).model_content()
        except Exception as error:  # litert-torch's quantizer and converter fail on some graphs (docs/runtimes.md)
            raise PhaseconvError(f"litert-torch's int8 quantization failed: {known_cause(error)[:200]}") from error
    with parked_stderr():  # the MLIR converter's per-pass log lines
        if state is None:
            return litert_torch.convert(program.module(), examples).model_content()
        converter = litert_torch.signature(SERVING, program.module(), examples)
        converter = converter.signature(INITIAL, _InitialState(state.initial), ())
        return converter.convert().model_content()


def _int8_module(ep: ExportedProgram, sets: list[tuple[torch.Tensor, ...]]):
    """`ep`'s module with litert-torch's static int8 quantization (per-channel weights), calibrated
    on the input `sets`, and the quantization config its converter takes with it."""
    from litert_torch.quantize import pt2e_quantizer, quant_config
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    quantizer = pt2e_quantizer.PT2EQuantizer().set_global(
        pt2e_quantizer.get_symmetric_quantization_config(is_per_channel=True)
    )
    module = prepare_pt2e(ep.module(), quantizer)
    with torch.no_grad():
        for inputs in sets:
            module(*inputs)
    return convert_pt2e(module, fold_quantize=False), quant_config.QuantConfig(pt2e_quantizer=quantizer)


def _by_index(names) -> list[str]:
    """A signature's input or output names (args_0, ..., args_10 or output_0, ...) in their order."""
    return sorted(names, key=lambda name: int(name.rsplit("_", 1)[1]))


def _ordered(outputs: dict) -> list[torch.Tensor]:
    """A signature runner's outputs in order, as tensors."""
    return [torch.from_numpy(outputs[name]) for name in _by_index(outputs)]


class LiteRTSession:
    """A .tflite model in LiteRT's interpreter (its default XNNPACK delegate) with `threads` threads."""

    def __init__(self, model: bytes, threads: int = 1):
        _, interpreter_class = require_litert()
        with parked_stderr():  # "INFO: Created TensorFlow Lite XNNPACK delegate for CPU." on the first call
            interpreter = interpreter_class(model_content=model, num_threads=threads)
            interpreter.allocate_tensors()
            signatures = interpreter.get_signature_list()
            self._serving = interpreter.get_signature_runner(SERVING)
            self.initial_state = _ordered(interpreter.get_signature_runner(INITIAL)()) if INITIAL in signatures else []
        self._names = _by_index(signatures[SERVING]["inputs"])
        self._inputs = len(self._names) - len(self.initial_state)
        self.state_names = self._names[self._inputs :]  # the state's inputs (args_N), after the model's own
        self._input_details = self._serving.get_input_details()
        self._output_details = self._serving.get_output_details()

    def run(self, inputs: tuple[torch.Tensor, ...], state: tuple[torch.Tensor, ...] = ()) -> list[torch.Tensor]:
        """The outputs for `inputs`; a stateful model's run from `state` (the trailing outputs of the
        call before), or from its initial state when `state` is empty."""
        if len(inputs) != self._inputs:
            raise PhaseconvError(f"the LiteRT model takes {self._inputs} inputs, got {len(inputs)}")
        if state and len(state) != len(self.initial_state):
            raise PhaseconvError(f"the LiteRT model keeps {len(self.initial_state)} state tensors, got {len(state)}")
        outputs = self._serving(**self._feed(inputs, state))
        return _ordered({name: _dequantized(value, self._output_details[name]) for name, value in outputs.items()})

    def timed_call(self, inputs: tuple[torch.Tensor, ...]):
        """A call on `inputs` converted once to what the model takes (int8 for an int8 model's), that
        returns its outputs as the interpreter gives them: the interpreter alone, for timing."""
        return partial(self._serving, **self._feed(inputs, ()))

    def _feed(self, inputs, state) -> dict:
        values = [*inputs, *(state or self.initial_state)]
        return {
            name: _as_the_model_takes(value.detach().contiguous().numpy(), self._input_details[name])
            for name, value in zip(self._names, values)
        }


def _as_the_model_takes(value, details):
    """An input as the model's tensor takes it: an integer cast to its width (litert-torch makes int64
    inputs int32), a float for an int8 tensor quantized, round(x / scale) + zero point, saturated."""
    import numpy as np

    dtype = details["dtype"]
    if value.dtype == dtype or not np.issubdtype(dtype, np.integer):
        return value
    limits = np.iinfo(dtype)
    if np.issubdtype(value.dtype, np.integer):
        if value.size and (value.min() < limits.min or value.max() > limits.max):
            raise PhaseconvError(f"an integer input does not fit the LiteRT model's {np.dtype(dtype).name}")
        return value.astype(dtype)
    scale, zero_point = details["quantization"]
    if scale == 0:
        return value
    return np.clip(np.round(value / scale) + zero_point, limits.min, limits.max).astype(dtype)


def _dequantized(value, details):
    """An int8 output of the model as float: (q - zero point) * scale."""
    import numpy as np

    scale, zero_point = details["quantization"]
    if scale == 0 or not np.issubdtype(value.dtype, np.integer):
        return value
    return ((value.astype(np.float32) - zero_point) * scale).astype(np.float32)
