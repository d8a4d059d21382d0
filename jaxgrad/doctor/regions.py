"""The layers of a captured program, for the doctor: leaf torch modules as regions.

An ``ExportedModule`` (``from_torch`` through ``torch.export``) has no jaxgrad layers,
but every ATen node keeps the torch module path it ran in; its regions
(``jaxgrad.nn.capture.regions``: one call of a leaf torch module each) are the doctor's layers.
So the doctor compares the port at each torch module's output with torch's forward
hook, and runs a region alone on torch's recorded input (input injection), by torch
path. A region reading several outside values (an attention module fed query and key)
is not compared on its own.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from jaxgrad.doctor.calls import Call, numpy_tree
from jaxgrad.nn.capture.program import ExportedModule, run
from jaxgrad.nn.capture.regions import Region, regions
from jaxgrad.nn.module import Module


def _output(region: Region, env: dict):
    values = [env[name] for name in region.outputs]
    return values[0] if len(values) == 1 else tuple(values)


@dataclasses.dataclass(frozen=True, eq=False)
class RegionLayer(Module):
    """A leaf torch module of a captured program, run alone: the doctor's "layer"."""

    model: ExportedModule
    path: str

    def _region(self, train: bool) -> Region:
        program = self.model.train_program if train else self.model.eval_program
        for region in regions(program):
            if region.path == self.path:
                return region
        raise ValueError(
            f"no region {self.path!r} in {self.model.class_name}'s "
            f"{'training' if train else 'evaluation'} program"
        )

    def forward_with_state(self, params, *inputs, buffers, train, key, path, **options):
        del key, path, options
        if len(inputs) != 1:
            raise ValueError(f"{self.path}: a region takes one input, got {len(inputs)}")
        region = self._region(train)
        program = self.model.train_program if train else self.model.eval_program
        prefix = f"{self.path}."
        env = {}
        for name, kind, target in program.inputs:
            if kind == "param" and target.startswith(prefix):
                env[name] = params[target[len(prefix) :]]
            elif kind == "buffer" and target.startswith(prefix):
                env[name] = buffers[target[len(prefix) :]]
            elif kind == "constant":
                env[name] = self.model.constants[target]
        env[region.input] = inputs[0]
        run(
            program,
            env,
            key=None,
            path="",
            random_draws=None,
            class_name=self.model.class_name,
            nodes=region.nodes,
        )
        names = {n.name for n in region.nodes}
        new = {
            target[len(prefix) :]: env[ref.name]
            for target, ref in program.buffer_updates
            if target.startswith(prefix) and ref.name in names
        }
        return _output(region, env), {**buffers, **new}


@dataclasses.dataclass(frozen=True, eq=False)
class TappedProgram(Module):
    """An ``ExportedModule`` that reports each region's call to ``recorder``."""

    inner: ExportedModule
    recorder: Any

    def forward_with_state(self, params, *inputs, buffers, train, key, path, **options):
        program, env = self.inner.bind(params, inputs, options, buffers, train)
        outputs, updates = run(
            program, env, key=key, path=path, random_draws=None, class_name=self.inner.class_name
        )
        for region in regions(program):
            self.recorder.started.append((region.path, region.index))
            prefix = f"{region.path}."
            names = {n.name for n in region.nodes}
            new = {
                target[len(prefix) :]: np.asarray(env[ref.name])
                for target, ref in program.buffer_updates
                if target.startswith(prefix) and ref.name in names
            }
            self.recorder.calls.append(
                Call(
                    region.path,
                    region.index,
                    "",
                    (np.asarray(env[region.input]),),
                    {},
                    numpy_tree(_output(region, env)),
                    new,
                )
            )
        from jaxgrad.nn.capture.program import unflatten

        new_buffers = {**buffers, **updates}
        return unflatten(program.out_tree, iter(outputs)), new_buffers


def leaves(model: ExportedModule) -> list:
    """``[(path, RegionLayer), ...]`` of the regions of either mode's program."""
    seen = {}
    for program in (model.eval_program, model.train_program):
        for region in regions(program):
            seen.setdefault(region.path, RegionLayer(model, region.path))
    return list(seen.items())


__all__ = ["Region", "RegionLayer", "TappedProgram", "leaves", "regions"]
