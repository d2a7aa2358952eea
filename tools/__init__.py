"""Release tooling run from the checkout, never shipped in the wheel: the gateway image's build
and check (`make image`, `make image-check`), its SBOM, and the locks' hashes."""
