"""Start llama-cpp-python's OpenAI-compatible server with weight repacking off.

``python -m tests.models.llama_server ARGS`` is ``python -m llama_cpp.server ARGS``, except
that llama.cpp's extra buffer types (its repacked weights for AMX and other wide kernels)
are off: on machines whose CPU reports AMX while the kernel does not grant it to the
process (some sandboxes and VMs), the repacked kernels die with SIGILL at the first token.
"""

from __future__ import annotations

import runpy
import sys


def main() -> None:
    import llama_cpp
    import llama_cpp.llama_cpp as lib

    default = lib.llama_model_default_params

    def without_extra_buffers():  # type: ignore[no-untyped-def]
        params = default()
        params.use_extra_bufts = False
        return params

    lib.llama_model_default_params = without_extra_buffers
    llama_cpp.llama_model_default_params = without_extra_buffers
    sys.argv[0] = "llama_cpp.server"
    runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
