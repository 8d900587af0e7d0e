"""phaseconv.lower and phaseconv.inspect through the runtime, external constants included."""

import pytest
import torch

import phaseconv
from phaseconv.runtimes.executorch import LoadedProgram
from tests.helpers import assert_close, export, run
from tests.rules.test_conv_transpose import CausalUpsampler, TwoDeconvsWithElu


@pytest.fixture(scope="module")
def program():
    x = torch.randn(1, 8, 6)
    return export(TwoDeconvsWithElu(), x), x


def test_lower_rewrites_and_summarizes(program, tmp_path):
    ep, x = program
    lowered = phaseconv.lower(ep)
    assert [(d.rule, d.applied) for d in lowered.decisions] == [("conv_transpose", True), ("elu", False)] + [
        ("conv_transpose", True)
    ]
    assert lowered.summary.partitions == 1 and not lowered.summary.outside
    assert lowered.summary.inside["XNNELU"] == 1  # XNNPACK's own ELU, enabled by phaseconv.lower
    assert lowered.summary.inside["XNNConvTranspose2d"] == 0 and lowered.summary.inside["XNNConv2d"] == 2
    (path,) = lowered.save(tmp_path / "model.pte")
    assert phaseconv.inspect(path).to_dict() == lowered.summary.to_dict()
    (out,) = LoadedProgram(path.read_bytes()).run((x,))
    assert_close(out, run(ep, x))


def test_lower_without_rewrite_keeps_the_deconvolutions(program):
    ep, _ = program
    lowered = phaseconv.lower(ep, rewrite=False)
    assert lowered.decisions == [] and lowered.summary.inside["XNNConvTranspose2d"] == 2


def test_external_constants_go_to_the_ptd_file(tmp_path):
    x = torch.randn(1, 64, 5)
    ep = export(CausalUpsampler(c_in=64, c_out=64), x)
    lowered = phaseconv.lower(ep, external_constants=True)
    pte, ptd = lowered.save(tmp_path / "model.pte")
    assert ptd.suffix == ".ptd"
    weight_bytes = sum(t.numel() * t.element_size() for t in phaseconv.rewrite(ep).state_dict.values())
    assert ptd.stat().st_size >= weight_bytes, "every weight, the phase weights included, is in the .ptd"
    assert pte.stat().st_size < weight_bytes / 10, "no weight stays in the .pte"
    (out,) = LoadedProgram(pte.read_bytes(), ptd).run((x,))
    assert_close(out, run(ep, x))


def test_lower_rejects_bad_arguments(program):
    ep, _ = program
    with pytest.raises(phaseconv.PhaseconvError, match="unknown backend 'coreml'"):
        phaseconv.lower(ep, backend="coreml")
    with pytest.raises(TypeError, match="ExportedProgram"):
        phaseconv.lower(torch.nn.Linear(2, 2))
    choices = "choose one of any, x86-fma3, x86-avx512, x86-avx512-amd, host"
    with pytest.raises(phaseconv.PhaseconvError, match=f"unknown target 'arm64'; {choices}"):
        phaseconv.lower(ep, target="arm64")


def test_the_host_target_is_one_the_rules_know(monkeypatch):
    from phaseconv.rules import TARGET_RULES
    from phaseconv.targets import host_target, resolve_target

    assert resolve_target("host") == host_target() in TARGET_RULES
    cases = [("AVX2", "GenuineIntel", "x86-fma3"), ("AVX2", "AuthenticAMD", "x86-fma3"), ("DEFAULT", "", "any")]
    cases += [("AVX512", "GenuineIntel", "x86-avx512"), ("AVX512", "AuthenticAMD", "x86-avx512-amd")]
    for capability, vendor, target in cases:
        monkeypatch.setattr("torch.backends.cpu.get_cpu_capability", lambda c=capability: c)
        monkeypatch.setattr("phaseconv.targets.cpu_vendor", lambda v=vendor: v)
        assert host_target() == target
    monkeypatch.setattr("platform.machine", lambda: "aarch64")
    assert host_target() == "any"  # GEMM forms only where they were measured to pay


def test_inspect_names_a_bad_file(tmp_path):
    with pytest.raises(phaseconv.PhaseconvError, match="no such file"):
        phaseconv.inspect(tmp_path / "missing.pte")
    junk = tmp_path / "junk.pte"
    junk.write_bytes(b"not a program at all" * 10)
    with pytest.raises(phaseconv.PhaseconvError, match="not an ExecuTorch program"):
        phaseconv.inspect(junk)
