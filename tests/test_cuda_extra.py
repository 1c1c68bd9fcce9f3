"""`pip install -e '.[cuda]'` (and `[cuda13]`) pins a CUDA JAX equal to the installed jax: a jax
upgrade that leaves the pins behind fails here, not on the first GPU machine."""

import configparser
import os

import jax
from packaging.requirements import Requirement
from packaging.version import Version

SETUP_CFG = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "setup.cfg")


def _requirements(key: str, extra: bool = True) -> list[Requirement]:
    cfg = configparser.ConfigParser()
    cfg.read(SETUP_CFG)
    text = cfg["options.extras_require" if extra else "options"][key]
    return [Requirement(line.split("#")[0].strip()) for line in text.splitlines() if line.split("#")[0].strip()]


def test_the_cuda_extras_pin_the_installed_jax():
    installed = Version(jax.__version__)
    base = next(r for r in _requirements("install_requires", extra=False) if r.name == "jax")
    assert installed in base.specifier, f"jax {installed} is outside install_requires' {base.specifier}"
    for extra, cuda in (("cuda", "cuda12"), ("cuda13", "cuda13")):
        (req,) = _requirements(extra)
        assert req.name == "jax" and req.extras == {cuda}, f"[{extra}] should be jax[{cuda}], got {req}"
        pins = [s for s in req.specifier if s.operator == "=="]
        assert pins and all(Version(s.version) == installed for s in pins), (
            f"[{extra}] pins {req.specifier}, the installed jax is {installed}: set jax[{cuda}]=={installed} "
            "in setup.cfg"
        )
