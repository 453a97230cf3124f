//! Where CPython keeps what the profiler reads, per minor version: the offsets the eBPF program
//! walks frames with, and those userspace reads code objects and strings with. Offsets are stable
//! within a minor version (CPython's ABI policy for these internal structures); they were
//! measured on the interpreters installed here (docs/cpython-layouts.md) and a test checks them
//! against the debug information of each.
use profiler_common::runtimes::python::{PythonOffsets, PythonRuns};

/// A CPython minor version (3.8 is `Version(8)`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Version(pub u8);

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "3.{}", self.0)
    }
}

/// Where the kernel's walk starts: what [`profiler_common::runtimes::python::PythonProcess::runtime`]
/// points at, the main interpreter's address being the word at `runtime_main_interpreter` there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Root {
    /// `_PyRuntime` (3.7+), an exported global.
    Runtime,
    /// `interp_head` (3.6): the static head of the interpreter list (its offset 0 is the newest
    /// interpreter, the main one unless the process made others), found by its name in the full
    /// symbol table or through the exported `PyInterpreterState_Head`, which returns it.
    InterpreterHead,
}

/// How a code object's line table is encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LineTable {
    /// 3.6 to 3.9: `co_lnotab`, (address increment, line increment) byte pairs; offsets in bytes.
    Lnotab,
    /// 3.10: PEP 626 `co_linetable`, (length, line delta) byte pairs; offsets in bytes.
    Pep626,
    /// 3.11+: PEP 657 location table; offsets in code units.
    Pep657,
}

/// What a [`profiler_common::runtimes::python::PythonFrame::instr`] is in this version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Instruction {
    /// `f_lasti` in bytes (3.6 to 3.9).
    LastiBytes,
    /// `f_lasti` in code units (3.10).
    LastiUnits,
    /// A pointer to the instruction (3.11+): its offset is from the code object's
    /// `co_code_adaptive`, in 2-byte code units.
    Pointer { code_adaptive: u32 },
}

/// A code object's fields, by offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CodeLayout {
    pub first_line: u32,
    pub filename: u32,
    pub name: u32,
    /// `co_qualname` (3.11+).
    pub qualname: Option<u32>,
    /// The bytes object of the line table (`co_lnotab` or `co_linetable`).
    pub line_table: u32,
}

/// A `str` object's layout (PEP 393 compact strings).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StringLayout {
    /// Where the characters of a compact ASCII string start (`sizeof(PyASCIIObject)`).
    pub ascii_data: u32,
    /// Where those of a compact non-ASCII string start (`sizeof(PyCompactUnicodeObject)`).
    pub compact_data: u32,
}

impl StringLayout {
    /// `ob_size`-like length in code points, and the `state` bit field.
    pub const LENGTH: u32 = 16;
    pub const STATE: u32 = 32;
}

/// A `bytes` object: its length and where its data starts, in every version.
pub(crate) const BYTES_LENGTH: u32 = 16;
pub(crate) const BYTES_DATA: u32 = 32;
/// `ob_type`, in every object of every version read.
pub const OB_TYPE: u32 = 8;

/// Everything read of one minor version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub version: Version,
    pub root: Root,
    /// What the eBPF program reads.
    pub kernel: PythonOffsets,
    pub instruction: Instruction,
    pub line_table: LineTable,
    pub code: CodeLayout,
    pub string: StringLayout,
}

const NONE: u32 = PythonOffsets::NONE;

/// The layout of a minor version, if it is one this profiler reads.
pub(crate) fn layout(version: Version) -> Option<&'static Layout> {
    layouts().iter().find(|layout| layout.version == version)
}

/// Every version's layout, oldest first.
pub fn layouts() -> &'static [Layout] {
    &LAYOUTS
}

const STRING_WITH_WSTR: StringLayout = StringLayout { ascii_data: 48, compact_data: 72 };
const STRING: StringLayout = StringLayout { ascii_data: 40, compact_data: 56 };

/// Each version as what changed since the one before.
static LAYOUTS: [Layout; 9] = [V3_6, V3_7, V3_8, V3_9, V3_10, V3_11, V3_12, V3_13, V3_14];

const V3_6: Layout = Layout {
    version: Version(6),
    root: Root::InterpreterHead,
    kernel: PythonOffsets {
        runs: PythonRuns::OnePerCall as u32,
        runtime_main_interpreter: 0,
        interpreter_threads: 8,
        thread_next: 8,
        thread_id: 152,
        thread_frame: 24,
        cframe_current_frame: NONE,
        frame_back: 24,
        frame_code: 32,
        frame_instr: 120,
        frame_is_entry: NONE,
        frame_owner: NONE,
        code_first_line: 36,
        frame_bytes: 128,
    },
    instruction: Instruction::LastiBytes,
    line_table: LineTable::Lnotab,
    code: CodeLayout { first_line: 36, filename: 96, name: 104, qualname: None, line_table: 112 },
    string: STRING_WITH_WSTR,
};

const V3_7: Layout = Layout {
    version: Version(7),
    root: Root::Runtime,
    kernel: PythonOffsets {
        runtime_main_interpreter: 32,
        thread_id: 176,
        frame_instr: 104,
        frame_bytes: 112,
        ..V3_6.kernel
    },
    ..V3_6
};

const V3_8: Layout = Layout {
    version: Version(8),
    kernel: PythonOffsets { runtime_main_interpreter: 40, code_first_line: 40, ..V3_7.kernel },
    code: CodeLayout { first_line: 40, filename: 104, name: 112, qualname: None, line_table: 120 },
    ..V3_7
};

const V3_9: Layout = Layout { version: Version(9), ..V3_8 };

const V3_10: Layout = Layout {
    version: Version(10),
    kernel: PythonOffsets { frame_instr: 96, frame_bytes: 104, ..V3_9.kernel },
    instruction: Instruction::LastiUnits,
    line_table: LineTable::Pep626,
    ..V3_9
};

const V3_11: Layout = Layout {
    version: Version(11),
    kernel: PythonOffsets {
        runs: PythonRuns::EntryFlag as u32,
        runtime_main_interpreter: 48,
        interpreter_threads: 16,
        thread_id: 152,
        thread_frame: 56,
        cframe_current_frame: 8,
        frame_back: 48,
        frame_instr: 56,
        frame_is_entry: 68,
        frame_owner: 69,
        code_first_line: 72,
        frame_bytes: 72,
        ..V3_10.kernel
    },
    instruction: Instruction::Pointer { code_adaptive: 184 },
    line_table: LineTable::Pep657,
    code: CodeLayout { first_line: 72, filename: 112, name: 120, qualname: Some(128), line_table: 136 },
    ..V3_10
};

const V3_12: Layout = Layout {
    version: Version(12),
    kernel: PythonOffsets {
        runs: PythonRuns::EntryShim as u32,
        interpreter_threads: 72,
        thread_id: 136,
        cframe_current_frame: 0,
        frame_back: 8,
        frame_code: 0,
        frame_is_entry: NONE,
        frame_owner: 70,
        code_first_line: 68,
        ..V3_11.kernel
    },
    instruction: Instruction::Pointer { code_adaptive: 192 },
    code: CodeLayout { first_line: 68, filename: 112, name: 120, qualname: Some(128), line_table: 136 },
    string: STRING,
    ..V3_11
};

const V3_13: Layout = Layout {
    version: Version(13),
    kernel: PythonOffsets {
        runtime_main_interpreter: 640,
        interpreter_threads: 7344,
        thread_id: 152,
        thread_frame: 72,
        cframe_current_frame: NONE,
        ..V3_12.kernel
    },
    instruction: Instruction::Pointer { code_adaptive: 200 },
    ..V3_12
};

// `f_executable` (at `frame_code`) is a `_PyStackRef` from 3.14: the kernel masks its tag bits.
const V3_14: Layout = Layout {
    version: Version(14),
    kernel: PythonOffsets { runtime_main_interpreter: 816, frame_owner: 74, frame_bytes: 75, ..V3_13.kernel },
    instruction: Instruction::Pointer { code_adaptive: 208 },
    ..V3_13
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_supported_version_has_one_layout() {
        for minor in 0..20 {
            let version = Version(minor);
            assert_eq!(layout(version).is_some(), (6..=14).contains(&minor), "{version}");
        }
    }

    #[test]
    fn the_kernel_reads_every_field_inside_its_bounded_reads() {
        for layout in &LAYOUTS {
            let k = &layout.kernel;
            let inside = |offset: u32, size: u32, bytes: u32| offset == NONE || offset + size <= bytes;
            assert!(k.frame_bytes <= PythonOffsets::MAX_FRAME_BYTES, "{}", layout.version);
            for field in [k.frame_back, k.frame_code, k.frame_instr] {
                assert!(inside(field, 8, k.frame_bytes), "{}", layout.version);
            }
            for field in [k.frame_is_entry, k.frame_owner] {
                assert!(inside(field, 1, k.frame_bytes), "{}", layout.version);
            }
            for field in [k.thread_next, k.thread_id, k.thread_frame] {
                assert!(inside(field, 8, PythonOffsets::THREAD_BYTES), "{}", layout.version);
            }
            assert!(inside(k.code_first_line, 4, PythonOffsets::CODE_BYTES), "{}", layout.version);
            assert!(inside(OB_TYPE, 8, PythonOffsets::CODE_BYTES));
        }
    }
}
