# lit configuration of the check-loom suite.
import os
import shutil
import sys

import lit.formats
from lit.llvm import llvm_config

config.name = "LOOM"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".test"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.loom_obj_root, "test")
config.excludes = ["CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py", "Inputs", "regressions"]

config.substitutions.append(("%PATH%", config.environment["PATH"]))
config.substitutions.append(("%loom_src_root", config.loom_src_root))
config.substitutions.append(("%loom_obj_root", config.loom_obj_root))

llvm_config.with_system_environment(["HOME", "INCLUDE", "LIB", "TMP", "TEMP"])
llvm_config.use_default_substitutions()
# FileCheck runs with -enable-var-scope so captures do not leak across
# CHECK-LABELs.
llvm_config.add_tool_substitutions(["loom-opt", "loomc", "loom-run"], [config.loom_tools_dir])
config.environment["FILECHECK_OPTS"] = "-enable-var-scope"
llvm_config.with_environment("PATH", config.loom_tools_dir, append_path=True)
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)

# Optional hardware and tools become features: GPU tests say
# `REQUIRES: cuda-gpu` and are unsupported where no GPU is present.
if shutil.which("nvidia-smi") and os.system("nvidia-smi -L > /dev/null 2>&1") == 0:
    config.available_features.add("cuda-gpu")
# Debian's python3-torch lives under /usr/bin/python3 (a pyenv python may
# shadow it on PATH): numerical checks against PyTorch require it.
torch_python = "/usr/bin/python3"
if os.system(torch_python + " -c 'import torch' > /dev/null 2>&1") == 0:
    config.available_features.add("torch")
    config.substitutions.append(("%torch_python", torch_python))
config.substitutions.append(("%loom_tools_dir", config.loom_tools_dir))
config.substitutions.append(("%python", sys.executable))
# protoc (protobuf-compiler) rewrites ONNX test models in text form.
if shutil.which("protoc") and os.path.exists("/usr/include/onnx/onnx.proto"):
    config.available_features.add("protoc")
# Open MPI's launcher (scripts/setup.sh installs openmpi-bin): data-parallel
# runs on several CPU ranks.
if shutil.which("mpirun"):
    config.available_features.add("mpirun")
nvcc = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None)
if nvcc:
    config.available_features.add("nvcc")
    config.substitutions.append(("%nvcc", nvcc))
# The HIP build of the runtime (scripts/build-hip.sh, which scripts/test.sh
# runs): `loomc --target=hip` links against it.
hip_runtime_dir = os.path.join(config.loom_obj_root, "runtime-hip")
if os.path.exists(os.path.join(hip_runtime_dir, "libloomrt.so")):
    config.available_features.add("hip-runtime")
    config.substitutions.append(("%hip_runtime_dir", hip_runtime_dir))
