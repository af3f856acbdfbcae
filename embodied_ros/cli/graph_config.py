"""The graph config of `up` and `replay`: a config YAML (default config/pi05.yaml) with --set and --bundle
applied. A bundle given where the config goes runs on the config shipped for its model family."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping, Sequence


def load_graph_config(config: str | None, bundle: str | None, settings: Sequence[str],
                      overrides: Mapping[str, Any] | None = None, say: Callable[[str], None] = print):
    """GraphConfig from the command line; ValueError (one line) for anything that cannot be used.
    `settings`: "KEY=VALUE" items (values are YAML); `say` gets the line telling which config a bundle runs on."""
    import yaml

    from embodied_ros.bundle import BundleError, open_bundle
    from embodied_ros.bundle.scan import starts_like_a_bundle
    from embodied_ros.node_infra.config import load_config
    from embodied_ros.node_infra.paths import default_config, family_config

    flat = {}
    for item in settings:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--set needs KEY=VALUE, got {item!r}")
        try:
            flat[key] = yaml.safe_load(value)
        except yaml.YAMLError as error:
            raise ValueError(f"--set {key}: the value is not YAML: {' '.join(str(error).split())}") from None
    flat.update(overrides or {})
    if config is not None and starts_like_a_bundle(config):
        if bundle:
            raise ValueError(f"{config} is a model bundle, not a graph config: give a config YAML (or none) "
                             f"with --bundle {bundle}")
        try:
            architecture = open_bundle(config, verify_digest=False).architecture
        except BundleError as error:
            raise ValueError(str(error)) from None
        family_default = family_config(architecture)
        if family_default is None:
            raise ValueError(f"{config} is a model bundle, not a graph config, and no config ships for its family "
                             f"{architecture!r}: give a config YAML with --bundle {config}")
        say(f"{config} is a model bundle: running it on {family_default} (its family's config; "
            f"to choose another: CONFIG --bundle {config})")
        config, bundle = str(family_default), config
    if bundle:
        flat["bundle"] = str(Path(bundle).resolve())
    return load_config(config or default_config(), flat)
