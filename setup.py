"""pip install . — builds terse's extension with Bazel and installs the
`terse` package (terse, terse.torch, terse.tensorflow, terse.optim) and the
`terserun` launcher.

On Debian 12, offline, into the system Python that has torch:

    /usr/bin/python3 -m pip install --no-build-isolation \
        --break-system-packages .

(--no-build-isolation: use the installed setuptools/wheel instead of
downloading them.) The extension is `bazel build //bindings/python:_terse.so`
copied into the package as terse/_terse.<abi>.so (and _efcp.so, terse.optim's
preconditioners, as terse/_efcp.<abi>.so), with libterse.so (the
engine) beside it, and _terse_tf_ops.so when /opt/terse-tf-venv exists. For
TensorFlow, install from that environment:

    /opt/terse-tf-venv/bin/pip install --no-build-isolation .
"""

import os
import shutil
import subprocess

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))
PACKAGE_DIR = os.path.join("bindings", "python")


def _version():
    scope = {}
    with open(os.path.join(ROOT, PACKAGE_DIR, "terse", "__init__.py")) as f:
        for line in f:
            if line.startswith("__version__"):
                exec(line, scope)  # noqa: S102 - our own one-line constant.
    return scope["__version__"]


class BazelExtension(Extension):
    """An extension module that a Bazel target builds."""

    def __init__(self, name, target, output):
        super().__init__(name, sources=[])
        self.target = target
        self.output = output  # Path under bazel-bin.


# Shared libraries installed beside the extension under their own names
# (no Python ABI suffix): the engine every binding links (libterse.so), and
# TensorFlow's op library when terse's TensorFlow environment exists
# (tools/setup_tf.sh), since it builds against that TensorFlow.
TF_VENV = "/opt/terse-tf-venv"
LIBRARIES = [("//bindings/c:libterse.so", "bindings/c/libterse.so")]
if os.path.isdir(TF_VENV) or os.environ.get("TERSE_WITH_TENSORFLOW") == "1":
    LIBRARIES.append(("//bindings/tensorflow:_terse_tf_ops.so",
                      "bindings/tensorflow/_terse_tf_ops.so"))


class BuildWithBazel(build_ext):
    def run(self):
        super().run()
        bazel = shutil.which("bazel")
        targets = [target for target, _ in LIBRARIES]
        subprocess.check_call([bazel, "build"] + targets, cwd=ROOT)
        package = os.path.join(self.build_lib, "terse")
        os.makedirs(package, exist_ok=True)
        for _, output in LIBRARIES:
            destination = os.path.join(package, os.path.basename(output))
            shutil.copyfile(os.path.join(ROOT, "bazel-bin", output),
                            destination)
            os.chmod(destination, 0o755)

    def build_extension(self, ext):
        if not isinstance(ext, BazelExtension):
            return super().build_extension(ext)
        bazel = shutil.which("bazel")
        if bazel is None:
            raise RuntimeError("bazel is not installed (Debian: "
                               "bazel-bootstrap; see tools/setup.sh)")
        subprocess.check_call([bazel, "build", ext.target], cwd=ROOT)
        built = os.path.join(ROOT, "bazel-bin", ext.output)
        destination = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(destination), exist_ok=True)
        # Bazel's outputs are read-only; the copy must not be.
        shutil.copyfile(built, destination)
        os.chmod(destination, 0o755)


setup(
    name="terse",
    version=_version(),
    description="Horovod-style gradient communication with adaptive "
                "compression (GraVAC)",
    package_dir={"": PACKAGE_DIR},
    packages=["terse", "terse.torch", "terse.tensorflow",
              "terse.tensorflow.keras", "terse.tensorflow.data",
              "terse.keras"],
    ext_modules=[BazelExtension("terse._terse",
                                "//bindings/python:_terse.so",
                                os.path.join(PACKAGE_DIR, "_terse.so")),
                 BazelExtension("terse._efcp",
                                "//bindings/python:_efcp.so",
                                os.path.join(PACKAGE_DIR, "_efcp.so"))],
    cmdclass={"build_ext": BuildWithBazel},
    scripts=["tools/terserun"],
    python_requires=">=3.9",
    zip_safe=False,
)
