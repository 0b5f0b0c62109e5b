"""The Hugging Face model configs that the package ships, found for a row's model."""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

from twin.calibration.aic_tables import SYSTEMS
from twin.hf_config import from_hf_config
from twin.model import ModelSpec

# A quantised repository's name: ``nvidia/Llama-3.1-8B-Instruct-FP8``, ``-NVFP4``,
# ``Qwen3-32B-FP8-Static-PerTensor`` (the weights' format; the architecture is the base
# model's).
QUANTISED_NAME_SUFFIX = re.compile(r"-(fp8|nvfp4|mxfp4)(?=-|$)", re.IGNORECASE)


def config_candidates(model_path: str) -> list[str]:
    """Hugging Face ids whose ``config.json`` describes ``model_path``'s architecture, in
    order: the id itself; the same name without a quantised repository's suffix
    (``nvidia/Llama-3.1-8B-Instruct-FP8`` is Meta's Llama-3.1-8B-Instruct quantised by
    NVIDIA ModelOpt, per its model card: the same shapes); Meta's pre-2024 name of a
    renamed Llama 3.1 repository (``meta-llama/Llama-3.1-8B`` was
    ``meta-llama/Meta-Llama-3.1-8B``, which the package caches); each without an
    ``-Instruct`` suffix (instruction tuning changes the weights, not the shapes: the
    same config.json keys for layers, widths and vocab). :func:`find_config` also looks
    for these names under another organisation."""
    org, _, name = model_path.rpartition("/")
    names = [name]
    quantised = QUANTISED_NAME_SUFFIX.search(name)
    if quantised is not None:
        names.append(name[: quantised.start()])
    names += [f"Meta-{n}" for n in names if n.startswith("Llama-3.1-")]
    names += [n.removesuffix("-Instruct") for n in names if n.endswith("-Instruct")]
    out: list[str] = []
    for n in names:
        hf_id = f"{org}/{n}" if org else n
        if hf_id not in out:
            out.append(hf_id)
    return out


def find_config(configs: Path, model_path: str) -> tuple[str, Path] | None:
    """The first cached config of :func:`config_candidates`, else the first of their
    names under any organisation (sorted; NVIDIA's quantised checkpoints carry the base
    model's name, e.g. ``nvidia/Qwen3-32B-NVFP4`` -> ``Qwen/Qwen3-32B``)."""
    candidates = config_candidates(model_path)
    for hf_id in candidates:
        if config_file(configs, hf_id).is_file():
            return hf_id, config_file(configs, hf_id)
    for hf_id in candidates:
        name = hf_id.rsplit("/", 1)[-1]
        for path in sorted(configs.glob(f"*--{name}_config.json")):
            return path.name.removesuffix("_config.json").replace("--", "/", 1), path
    return None


def config_file(configs: Path, hf_id: str) -> Path:
    """The package's cached config of ``hf_id``: ``<org>--<name>_config.json``."""
    return configs / f"{hf_id.replace('/', '--')}_config.json"


@cache
def load_model(path: str, hf_id: str) -> ModelSpec:
    return from_hf_config(path, name=hf_id)


@cache
def read_config(path: str) -> dict[str, Any]:
    data = json.loads(Path(path).read_text())
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    if isinstance(data.get("text_config"), dict):  # a multimodal wrapper's language model
        return {**data, **data["text_config"]}
    return data


def system_gpus() -> dict[str, str]:
    """The CSV's ``system`` -> the twin's GPU name: the inverse of the kernel tables' map
    (``calibration.aic_tables.SYSTEMS``: ``h100_sxm`` -> ``h100``, ``gb200`` -> ``gb200``)."""
    return {system: gpu for gpu, system in SYSTEMS.items()}
