"""A CycloneDX SBOM of the gateway image's Python packages, written beside the image by `make image`.

    python -m tools.sbom --tag triton-stack/gateway:0.4.0 [--engine buildah|docker] [--out F]

The inventory is read inside the image, by its own interpreter (/opt/venv/bin/python and
importlib.metadata): what the image holds, not what a lock file says it should. cyclonedx-python-lib
writes the document (CycloneDX 1.6 JSON: the image as the described component, one library per
distribution with its PyPI package URL and its declared licence) and validates it against the
schema. `make image-check` also checks the inventory against requirements/gateway.lock.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from cyclonedx.model import ExternalReference, ExternalReferenceType, XsUri
from cyclonedx.model.bom import Bom
from cyclonedx.model.component import Component, ComponentType
from cyclonedx.model.license import DisjunctiveLicense, LicenseExpression
from cyclonedx.output.json import JsonV1Dot6
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator
from packageurl import PackageURL
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[1]
VENV_PYTHON = "/opt/venv/bin/python"
# Run by the image's interpreter: every distribution on its path, with what it declares.
INVENTORY = """
import json
from importlib import metadata
seen = {}
for dist in metadata.distributions():
    meta = dist.metadata
    seen.setdefault(meta["Name"], {
        "name": meta["Name"], "version": dist.version,
        "license_expression": meta.get("License-Expression"), "license": meta.get("License"),
        "home": meta.get("Home-page"),
    })
print(json.dumps(sorted(seen.values(), key=lambda d: d["name"].lower())))
"""


class SbomError(RuntimeError):
    """The inventory could not be read from the image, or the document is not valid CycloneDX."""


@dataclass(frozen=True)
class Package:
    name: str
    version: str
    license_expression: str | None = None
    license: str | None = None
    home: str | None = None

    @property
    def key(self) -> str:
        return canonicalize_name(self.name)


def inventory_argv(tag: str, engine: str) -> list[str]:
    if engine == "docker":
        return ["docker", "run", "--rm", "--entrypoint", VENV_PYTHON, tag, "-c", INVENTORY]
    return ["buildah", "run", "--isolation", "chroot", "{ctr}", "--", VENV_PYTHON, "-c", INVENTORY]


def read_inventory(tag: str, engine: str = "buildah") -> list[Package]:
    """The image's installed distributions, read by the image's own Python."""
    argv = inventory_argv(tag, engine)
    container = ""
    try:
        if engine == "buildah":
            container = _sh("buildah", "from", "--pull=never", tag).strip()
            argv = [container if a == "{ctr}" else a for a in argv]
        out = _sh(*argv)
    finally:
        if container:
            subprocess.run(["buildah", "rm", container], capture_output=True)
    return [Package(**entry) for entry in json.loads(out)]


def _sh(*argv: str) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SbomError(f"{argv[0]}: {exc}") from exc
    if done.returncode != 0:
        raise SbomError(f"{' '.join(argv[:3])} failed: {done.stderr.strip()[-400:]}")
    return done.stdout


def _licenses(package: Package) -> list[LicenseExpression | DisjunctiveLicense]:
    """The SPDX expression a distribution declares (PEP 639), else its one-line License field; a
    multi-line License field is the licence's full text, which an SBOM does not carry."""
    if package.license_expression:
        return [LicenseExpression(package.license_expression)]
    text = (package.license or "").strip()
    if text and "\n" not in text and len(text) <= 80 and text.upper() != "UNKNOWN":
        return [DisjunctiveLicense(name=text)]
    return []


def build_bom(tag: str, packages: list[Package]) -> Bom:
    name, _, version = tag.rpartition(":") if ":" in tag.split("/")[-1] else (tag, "", "")
    image = Component(
        type=ComponentType.CONTAINER,
        name=name,
        version=version or None,
        bom_ref=f"image:{tag}",
        description="triton-stack gateway image: Feast online features + one Triton call",
    )
    bom = Bom()
    bom.metadata.component = image
    for package in packages:
        purl = PackageURL(type="pypi", name=package.key, version=package.version)
        references = []
        if package.home and package.home.startswith(("http://", "https://")):
            references.append(ExternalReference(type=ExternalReferenceType.WEBSITE, url=XsUri(package.home)))
        component = Component(
            type=ComponentType.LIBRARY,
            name=package.name,
            version=package.version,
            purl=purl,
            bom_ref=str(purl),
            licenses=_licenses(package),
            external_references=references,
        )
        bom.components.add(component)
        bom.register_dependency(image, [component])
    return bom


def render(bom: Bom) -> str:
    """The document as CycloneDX 1.6 JSON, validated against the schema before it is returned."""
    text = JsonV1Dot6(bom).output_as_string(indent=2)
    error = JsonStrictValidator(SchemaVersion.V1_6).validate_str(text)
    if error is not None:
        raise SbomError(f"not valid CycloneDX 1.6: {error}")
    return text


def write_sbom(tag: str, out: Path, engine: str = "buildah") -> list[Package]:
    packages = read_inventory(tag, engine)
    text = render(build_bom(tag, packages))
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    partial.write_text(text)
    partial.replace(out)  # no half-written SBOM under the final name
    return packages


def default_out(tag: str) -> Path:
    return REPO / "build" / (tag.replace("/", "-").replace(":", "-") + ".cdx.json")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.sbom", description=__doc__.split("\n")[0])
    parser.add_argument("--tag", required=True, help="the built image, e.g. triton-stack/gateway:0.4.0")
    parser.add_argument("--engine", choices=["buildah", "docker"], default="buildah")
    parser.add_argument("--out", type=Path, help="default: build/<image>-<version>.cdx.json")
    args = parser.parse_args(argv)
    out = args.out or default_out(args.tag)
    try:
        packages = write_sbom(args.tag, out, args.engine)
    except SbomError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(f"SBOM of {args.tag}: {len(packages)} Python packages, CycloneDX 1.6 JSON in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
