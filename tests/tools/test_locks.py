"""Supply chain: every lock pins each package with the sha256 of its files, and every install the
Makefile and the Dockerfile run checks them (`--require-hashes`), so pip installs the bytes the
lock names or stops. tools/locks.py writes the hashes; these tests keep them there."""

from __future__ import annotations

import re

from tools.locks import LOCKS, REQUIREMENTS, TORCH_CPU, TORCH_CUDA, Lock, hashes, pinned

REPO = REQUIREMENTS.parent
ALL_LOCKS = [REQUIREMENTS / name for name in (*LOCKS, TORCH_CPU, TORCH_CUDA)]


def test_every_pin_of_every_lock_carries_sha256_hashes() -> None:
    for path in ALL_LOCKS:
        found = hashes(path.read_text())
        assert found, f"{path.name} pins nothing"
        assert [pin for pin, digests in found.items() if not digests] == [], path.name
        for pin in found:
            exact = re.match(r"^[A-Za-z0-9._-]+(\[[a-z0-9,_-]+\])?==\S+( ; .+)?$", pin)
            assert exact, f"{path.name}: {pin!r}"


def test_no_lock_in_requirements_is_left_out_of_the_hashing() -> None:
    on_disk = {path.name for path in REQUIREMENTS.glob("*.lock")}
    assert on_disk == {path.name for path in ALL_LOCKS}


def _install_lines(text: str) -> list[str]:
    """Every command that installs a lock (`pip install ... -r <lock>`, `uv pip install ... -r`,
    or the Makefile's $(LOCKED_INSTALL) <lock>), and the LOCKED_INSTALL definitions themselves;
    continuation lines joined."""
    joined = text.replace("\\\n", " ")
    pattern = r"pip install .*-r( \S*\.lock)?$|pip install .*-r \S*\.lock|\$\(LOCKED_INSTALL\) \S*\.lock"
    return [line for line in joined.splitlines() if re.search(pattern, line)]


def test_every_lock_install_in_the_makefile_and_the_dockerfile_requires_hashes() -> None:
    makefile = (REPO / "Makefile").read_text()
    defined = [line for line in makefile.splitlines() if line.startswith("LOCKED_INSTALL =")]
    assert len(defined) == 2 and all("--require-hashes --no-deps" in line for line in defined)
    for name in ("Makefile", "Dockerfile"):
        installs = _install_lines((REPO / name).read_text())
        assert installs, name
        checked = ("--require-hashes", "$(LOCKED_INSTALL)")
        unchecked = [line.strip() for line in installs if not any(word in line for word in checked)]
        assert unchecked == [], name
    for lock in ("bootstrap.lock", "core.lock", "project.lock", TORCH_CPU, TORCH_CUDA):
        assert re.search(rf"(-r|\$\(LOCKED_INSTALL\)) requirements/{re.escape(lock)}", makefile), lock


def test_the_peer_benchmark_installs_its_lock_with_hashes() -> None:
    source = (REPO / "benchmarks" / "peer_bench.py").read_text()
    assert '"--require-hashes"' in source


def test_both_torch_locks_and_the_torch_extra_name_one_version() -> None:
    import tomllib

    cpu = pinned(REQUIREMENTS / TORCH_CPU)["torch"][1]
    cuda = pinned(REQUIREMENTS / TORCH_CUDA)["torch"][1]
    extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["torch"]
    assert cpu == f"{cuda}+cpu"
    assert f"torch=={cuda}" in extra
    # torch-cuda.lock adds only what project.lock lacks: no package at two versions in one venv
    project = pinned(REQUIREMENTS / "project.lock")
    cuda_pins = set(pinned(REQUIREMENTS / TORCH_CUDA))
    assert Lock.read(REQUIREMENTS / TORCH_CUDA).pins and not cuda_pins & set(project)
