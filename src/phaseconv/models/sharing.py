"""Copies of a module that share its parameters: a model adapted for export (its attention given a
cache, its convolutions a streaming state) is a new tree of modules over the same weights, so a
program of several adaptations holds the weights once."""

from __future__ import annotations

import copy

from torch import nn


def copy_sharing_parameters(module: nn.Module) -> nn.Module:
    """A deep copy of `module` whose parameters are the original's (replacing a submodule or a
    parameter of the copy leaves the original as it was; its buffers, which a step may write, are copied)."""
    return copy.deepcopy(module, memo={id(parameter): parameter for parameter in module.parameters()})
