"""phaseconv imports without its optional peers, and says how to install one when it is used."""

import subprocess
import sys

BLOCKED = ("litert_torch", "ai_edge_litert", "onnx", "onnxscript", "onnxruntime")

SCRIPT = f"""
import importlib.abc, importlib.util, sys, torch

ep = torch.export.export(torch.nn.ConvTranspose1d(2, 2, 4, 2), (torch.randn(1, 2, 5),))


class Missing(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    # importing a blocked package fails as if it were not installed
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {BLOCKED!r}:
            return importlib.util.spec_from_loader(name, self)

    def create_module(self, spec):
        raise ModuleNotFoundError(f"No module named {{spec.name!r}}")


sys.meta_path.insert(0, Missing())
import phaseconv

for export in (phaseconv.export_litert, phaseconv.export_onnx):
    try:
        export(ep)
    except phaseconv.PhaseconvError as error:
        print(error)
"""


def test_phaseconv_imports_without_its_peers_and_gives_the_install_hint():
    result = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "litert-torch is not installed: LiteRT export and its interpreter need pip install 'phaseconv[litert]'",
        "onnxscript is not installed: ONNX export and ONNX Runtime need pip install 'phaseconv[onnx]'",
    ]
