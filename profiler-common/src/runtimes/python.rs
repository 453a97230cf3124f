//! CPython's records: what the kernel is told of a process running it ([`PythonProcess`]) and
//! the frames it reads of a sample ([`PythonFrame`]).
use super::{ProcessRecord, RuntimeKind};

/// Deepest Python stack recorded, in frames; a deeper one is cut there, its outermost frames
/// left out, and marked [`super::RuntimeWalk::Truncated`].
pub const MAX_PYTHON_FRAMES: usize = 512;

/// One Python frame, as the eBPF program read it from the interpreter's memory at sample time.
/// Names, files and lines are read by userspace from the code object, which lives on after the
/// frame returns; `first_line` tells it whether that address still holds the same code object.
#[repr(C)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PythonFrame {
    /// The code object (`PyCodeObject *`); 0 for a record that only ends an empty run (a call of
    /// the eval loop caught after popping its last frame).
    pub code: u64,
    /// Where the frame was in its code, as the interpreter keeps it: `f_lasti` (an `int`, the
    /// low 32 bits) up to 3.10, the instruction pointer (`prev_instr`, `instr_ptr`) from 3.11.
    pub instr: u64,
    /// The code object's `co_firstlineno` when the frame was read.
    pub first_line: u32,
    /// Bit set of [`python_frame_flags`].
    pub flags: u32,
}

/// Bits of [`PythonFrame::flags`].
pub mod python_frame_flags {
    /// The outermost frame of one run of the eval loop: the native stack has one
    /// `_PyEval_EvalFrameDefault` call per run, which the run's frames replace.
    pub const RUN_END: u32 = 1 << 0;
}

/// How a CPython version links its frames to the native calls of the eval loop.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PythonRuns {
    /// 3.6–3.10: each frame is evaluated by a call of its own.
    OnePerCall = 0,
    /// 3.11: a run ends at a frame whose `is_entry` is set.
    EntryFlag = 1,
    /// 3.12+: a run ends before a shim frame the call put on the C stack (`owner` 3).
    EntryShim = 2,
}

/// Where the fields the eBPF program reads are, in one CPython minor version's structures, in
/// bytes. [`PythonOffsets::NONE`] for a field the version does not have.
#[repr(C)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PythonOffsets {
    /// A [`PythonRuns`].
    pub runs: u32,
    /// `_PyRuntimeState.interpreters.main`; 0 for 3.6's `interp_head`, which points at it.
    pub runtime_main_interpreter: u32,
    /// `PyInterpreterState.tstate_head` / `threads.head`: the newest thread state.
    pub interpreter_threads: u32,
    /// `PyThreadState.next`.
    pub thread_next: u32,
    /// `PyThreadState.thread_id`: the thread's `pthread_self()`, its FS base on x86-64.
    pub thread_id: u32,
    /// `PyThreadState.frame` (up to 3.10), `.cframe` (3.11, 3.12), `.current_frame` (3.13+).
    pub thread_frame: u32,
    /// `_PyCFrame.current_frame` when `thread_frame` leads to a `_PyCFrame` (3.11, 3.12).
    pub cframe_current_frame: u32,
    /// The frame's caller: `f_back` / `previous`.
    pub frame_back: u32,
    /// The frame's code object: `f_code` / `f_executable` (3.14's a tagged `_PyStackRef`: its
    /// low 3 bits are masked).
    pub frame_code: u32,
    /// `f_lasti`, `prev_instr` or `instr_ptr` (see [`PythonFrame::instr`]).
    pub frame_instr: u32,
    /// `_PyInterpreterFrame.is_entry` (3.11).
    pub frame_is_entry: u32,
    /// `_PyInterpreterFrame.owner` (3.11+).
    pub frame_owner: u32,
    /// `PyCodeObject.co_firstlineno`.
    pub code_first_line: u32,
    /// Bytes read of each frame: up to the end of the last field used (a frame may be the last
    /// thing in its memory), at most [`Self::MAX_FRAME_BYTES`].
    pub frame_bytes: u32,
}

impl PythonOffsets {
    /// The value of a field the version does not have.
    pub const NONE: u32 = u32::MAX;
    pub const MAX_FRAME_BYTES: u32 = 128;
    /// Bytes read of each code object and each thread state, where every field used is (both
    /// are larger in every version).
    pub const CODE_BYTES: u32 = 80;
    pub const THREAD_BYTES: u32 = 256;
}

/// The data of a [`super::RuntimeProcess`] of kind Python: a process running CPython, and where
/// to find its threads' frames.
#[repr(C)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PythonProcess {
    /// Where the walk starts: `&_PyRuntime` in the process (3.7+), or 3.6's `&interp_head`; the
    /// main interpreter is the word at `offsets.runtime_main_interpreter` there.
    pub runtime: u64,
    /// `&PyCode_Type` in the process: what a code object's `ob_type` is.
    pub code_type: u64,
    pub offsets: PythonOffsets,
}

/// Most bytes of Python frame records in a sample.
pub const MAX_FRAMES_BYTES: usize = MAX_PYTHON_FRAMES * core::mem::size_of::<PythonFrame>();

// SAFETY: a `repr(C)` record of integers, every bit pattern of which is one.
unsafe impl ProcessRecord for PythonProcess {
    const KIND: RuntimeKind = RuntimeKind::Python;
}
