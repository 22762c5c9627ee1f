"""Regenerate the vendored CRD schemas in this folder from upstream CRD YAML.

The tests validate manifests against these schemas offline (no cluster, no network). Upstream files are
Apache-2.0 (see NOTICE); we keep only `spec.versions[name=v1].schema.openAPIV3Schema` with `description`
strings removed, which is all validation needs and ~10x smaller.

    python k8s/schema/vendor.py KUBERAY_CRD.yaml rayservice.v1.schema.json "kuberay@feeaf72f"
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml


def strip(node: Any) -> Any:
    if isinstance(node, dict):
        # `description` is a free-text key except inside `properties`, where it may be a field name.
        return {
            k: (strip_props(v) if k == "properties" else strip(v))
            for k, v in node.items()
            if k != "description"
        }
    if isinstance(node, list):
        return [strip(v) for v in node]
    return node


def strip_props(props: dict[str, Any]) -> dict[str, Any]:
    return {name: strip(sub) for name, sub in props.items()}


def extract(crd: dict[str, Any], version: str = "v1") -> dict[str, Any]:
    for v in crd["spec"]["versions"]:
        if v["name"] == version:
            return strip(v["schema"]["openAPIV3Schema"])
    raise KeyError(version)


def main(src: str, dest: str, origin: str) -> None:
    crd = yaml.safe_load(Path(src).read_text())
    schema = extract(crd)
    schema["$comment"] = (
        f"Derived from {crd['metadata']['name']} CRD ({origin}), Apache-2.0; descriptions removed. See NOTICE."
    )
    Path(dest).write_text(json.dumps(schema, sort_keys=True, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:4])
