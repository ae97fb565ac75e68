"""Whose exception it is: the implementation's (a finding) or the judge's own (an internal error).

An oracle that meets an exception must know who raised it.  The implementation under judgement raising
is a finding against it; the judge's own code raising — staging or transferring tensors, the reference,
the float64 truth, a comparison, a strategy, writing the report — is a defect of the judge, which must
never be reported as the implementation's.  The battery calls every implementation function through a
wrapper that turns what escapes the call into :class:`Raised`; any other exception an oracle meets is the
judge's and becomes a :class:`JudgeError`, which ends the run as an internal error (``tools/certify-cells``
exit 3) and writes no certificate.

Running out of memory (:func:`out_of_memory`) is neither's: it is a fact about the machine (other processes
hold the GPU), whoever's allocation met it, so it ends the run as the judge's, concluding nothing.
"""
from __future__ import annotations


class JudgeError(Exception):
    """The judge's own code failed: an internal error, never a finding against the implementation.

    ``oracle`` and ``recipe`` say where, when known, so that the report can print a reproduction."""

    def __init__(self, message: str, oracle: str | None = None, recipe: dict | None = None):
        super().__init__(message)
        self.message, self.oracle, self.recipe = message, oracle, recipe


class Raised(Exception):
    """The implementation under judgement raised ``error`` (its own exception, unchanged, as ``error``)."""

    def __init__(self, error: BaseException):
        super().__init__(f"{type(error).__name__}: {error}")
        self.error = error


def judge_error(what: str, error: BaseException, oracle: str | None = None) -> JudgeError:
    """``error``, met in the judge's ``what``, as a JudgeError (a JudgeError passes unchanged)."""
    if isinstance(error, JudgeError):
        return error
    found = JudgeError(f"{what} raised {type(error).__name__}: {error}", oracle)
    found.__cause__ = error
    return found


# how an error says the GPU's or the host's memory ran out: torch's OutOfMemoryError ("CUDA out of memory"),
# a CUDA error (AcceleratorError: "out of memory", cudaErrorMemoryAllocation), the CPU allocator's "not
# enough memory", Python's MemoryError
_OUT_OF_MEMORY_WORDS = ("out of memory", "cudaerrormemoryallocation", "not enough memory", "memoryerror")


def out_of_memory(error: BaseException | str) -> bool:
    """Whether ``error`` — an exception, or the text of one (a message, a log's lines) — is running out of
    memory: a MemoryError or an OutOfMemoryError of any module, or a RuntimeError (a CUDA error) saying so."""
    if isinstance(error, str):
        return any(words in error.lower() for words in _OUT_OF_MEMORY_WORDS)
    return isinstance(error, MemoryError) or type(error).__name__ == "OutOfMemoryError" or \
        (isinstance(error, RuntimeError) and out_of_memory(str(error)))


# how a CUDA error says a kernel faulted (the context is lost): an illegal or misaligned access, a launch that
# failed or trapped, an illegal instruction, an uncorrectable ECC error, an assert that fired. Not "device-side
# assert" alone: torch ends every CUDA error's text with "Compile with `TORCH_USE_CUDA_DSA` to enable device-side
# assertions", so a graph capture that an op's own sync invalidated read as a fault (an H100, 2026-12-07d: torch's
# rollback_restore run again alone, and its neighbours, for its own capture error: 210 s of judging against 63)
_GPU_FAULT_WORDS = ("illegal memory access", "misaligned address", "unspecified launch failure",
                    "illegal instruction", "hardware stack error", "uncorrectable ecc error", "cudaerrorillegaladdress",
                    "cudaerrorlaunchfailure", "device-side assert triggered", "cudaerrorassert")


def gpu_fault(message: str) -> bool:
    """Whether ``message`` (an error's text, a finding) says a kernel on the GPU faulted.  Where other processes
    ran kernels on the same GPU, the fault may be theirs: on an H100 (2026-12-06g) a kernel spinning in one
    process ended as another process on the GPU met an illegal memory access."""
    return any(words in message.lower() for words in _GPU_FAULT_WORDS)


def out_of_memory_line(lines: list[str]) -> str | None:
    """The line of a process's last ones that says memory ran out (after a CUDA error come lines of advice
    about device-side assertions), or None."""
    return next((line for line in lines if out_of_memory(line)), None)
