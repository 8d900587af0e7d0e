"""A program's methods lowered one at a time, here or in workers, their weights held once."""

import hashlib
import os

import torch

import phaseconv
from phaseconv.graph.program import copy_graph
from phaseconv.lowering.blobs import BlobFolder, delegates
from phaseconv.lowering.methods import MethodLowering, lower_each
from phaseconv.lowering.profile import StageLog
from phaseconv.runtimes.executorch import LoadedProgram
from tests.helpers import export
from tests.rules.test_conv_transpose import TwoDeconvsWithElu
from tests.runtimes.test_executorch import StartOver, WriteAt


class Lookup(torch.nn.Module):
    """An embedding: a parameter XNNPACK does not take, so the program keeps it (requires_grad and all)."""

    def __init__(self):
        super().__init__()
        self.table = torch.nn.Embedding(16, 4)

    def forward(self, ids):
        return self.table(ids) * 2


def methods():
    """Methods that share a state, a module's weights (the same upsampler at two lengths), and one
    whose parameter stays outside the delegate."""
    upsampler = TwoDeconvsWithElu()
    return {
        "write": export(WriteAt(64), torch.ones(4, 1), torch.tensor([0])),
        "start_over": export(StartOver(64)),
        "upsample": export(upsampler, torch.randn(1, 8, 6)),
        "upsample_long": export(upsampler, torch.randn(1, 8, 12)),
        "lookup": export(Lookup(), torch.tensor([[1, 2, 3]])),
    }


def fingerprints(programs):
    return {
        (method, name): hashlib.sha256(value.detach().contiguous().numpy().tobytes()).hexdigest()
        for method, program in programs.items()
        for name, value in [*program.state_dict.items(), *program.constants.items()]
    }


def test_methods_lowered_here_and_in_workers_give_the_bytes_of_one_lowering():
    """lowering.xnnpack.assemble joins methods lowered on their own into the program that ExecuTorch's
    one call over all of them gives, byte for byte, shared state and kept parameters included; methods
    lowered in workers (sent through ExecuTorch's serde, their weights in shared memory) give those
    bytes too, and the weights they were given are as they were."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower

    from phaseconv.lowering.xnnpack import assemble, partitioner_configs

    programs = methods()
    together = to_edge_transform_and_lower(
        dict(sorted(programs.items())),
        partitioner=[XnnpackPartitioner(configs=partitioner_configs())],
        compile_config=EdgeCompileConfig(_check_ir_validity=False),
        constant_methods={"settings": "{}"},
    )
    one_call = assemble({name: together.exported_program(name) for name in together.methods}, {"settings": "{}"}).buffer
    before = fingerprints(programs)
    for workers in (1, 2):
        lowered = phaseconv.lower(programs, rewrite=False, workers=workers, constant_methods={"settings": "{}"})
        assert lowered.buffer == one_call, workers
    assert fingerprints(programs) == before
    program = LoadedProgram(one_call)
    assert torch.equal(program.run((torch.ones(4, 1), torch.tensor([3])), "write")[0], torch.ones(4))
    ids = torch.tensor([[1, 2, 3]])
    assert torch.equal(program.run((ids,), "lookup")[0], programs["lookup"].module()(ids))


def test_each_weight_is_spilled_once_whichever_method_reads_it(tmp_path):
    """The delegates' weights go to the blob folder as XNNPACK serializes them, one file per distinct
    weight: the upsampler's two methods read one set."""
    programs = {name: program for name, program in methods().items() if name.startswith("upsample")}
    lowering = MethodLowering("any", {"xnnpack_elu": True, "shape_chains": True})
    lowered = lower_each(programs, lowering, BlobFolder(tmp_path), StageLog(), workers=2)
    files = {path.name for path in tmp_path.iterdir()}
    modules = [module for program, _ in lowered.values() for module in delegates(program).values()]
    named = [module.named_data_store_output for module in modules]
    keys = {key for output in named for key in output.pte_data}
    assert len(files) == len(keys) > 0  # the two methods' keys are one set: one file each
    assert all(not isinstance(data, bytes) for output in named for data in output.buffers)
    assert not any(name.endswith(".partial") for name in files)


def test_workers_are_never_forked_from_this_process():
    """A fork copies another library's threads and locks in mid-use (JAX warns of it): the workers
    come from a fork server, a clean process, so this one never forks while lowering."""
    forks = []
    here = os.getpid()
    os.register_at_fork(before=lambda: forks.append(os.getpid()) if os.getpid() == here and watching else None)
    watching = True
    try:
        phaseconv.lower(methods(), rewrite=False, workers=2)
    finally:
        watching = False
    assert forks == []


def test_stages_say_where_the_time_and_memory_went():
    stages = StageLog()
    phaseconv.lower(methods(), workers=2, stages=stages)
    by_method = {}
    for stage in stages.stages:
        by_method.setdefault(stage.method, []).append((stage.process, stage.stage))
        assert stage.seconds >= 0 and stage.peak_mib >= stage.end_mib > 0
    assert {("worker", "rewrite"), ("worker", "to_edge"), ("worker", "to_backend"), ("main", "unpack")} <= set(
        by_method["upsample"]
    )
    assert by_method[None] == [("main", "assemble"), ("main", "serialize")]


def test_a_copy_of_the_graph_shares_the_weights_and_copies_the_state():
    program = methods()["write"]
    copied = copy_graph(program)
    assert copied.state_dict["cache"] is not program.state_dict["cache"]  # a buffer the program writes
    upsample = methods()["upsample"]
    copied = copy_graph(upsample)
    assert all(copied.state_dict[name] is value for name, value in upsample.state_dict.items())
    assert copied.graph is not upsample.graph and copied.state_dict is not upsample.state_dict


def test_quantized_weights_cross_to_the_workers_and_the_program_is_the_same():
    """torchao's quantized weights (a tensor subclass torch.multiprocessing cannot share) cross as their
    inner tensors, large ones in shared memory, small ones by value."""
    from torchao.quantization.granularity import PerGroup
    from torchao.quantization.quant_api import Int8DynamicActivationIntxWeightConfig, quantize_

    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 8))
    config = Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int4, weight_granularity=PerGroup(32))
    quantize_(module, config)
    programs = {f"rows_{n}": export(module, torch.randn(n, 1024)) for n in (1, 4)}
    in_workers = phaseconv.lower(programs, rewrite=False, workers=2).buffer
    assert in_workers == phaseconv.lower(programs, rewrite=False, workers=1).buffer
    x = torch.randn(4, 1024)
    assert torch.allclose(LoadedProgram(in_workers).run((x,), "rows_4")[0], module(x), atol=1e-2)
