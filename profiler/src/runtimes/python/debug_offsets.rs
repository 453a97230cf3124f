//! CPython 3.13 and later describe their own layout at the start of `_PyRuntime`
//! (`_Py_DebugOffsets`, written for debuggers and out-of-process profilers). The image carries it
//! in its initialized data, so it is read from the file: every offset of [`Layout`] that it also
//! states is compared, and a build whose structures moved (a patched distribution build, another
//! configuration) is refused rather than misread.
use super::layout::{Instruction, Layout};

/// `cookie`: the first 8 bytes of `_Py_DebugOffsets`.
const COOKIE: &[u8; 8] = b"xdebugpy";

/// Where each field read here sits in `_Py_DebugOffsets` (3.13), by its path in the struct; a
/// test checks them against the debug information of the installed 3.13.
pub(super) const VERSION: usize = 8;
pub(super) const FREE_THREADED: usize = 16;
pub(super) const FIELDS: [(&str, usize); 12] = [
    ("runtime_state.interpreters_head", 40),
    ("interpreter_state.threads_head", 72),
    ("thread_state.next", 168),
    ("thread_state.current_frame", 184),
    ("thread_state.thread_id", 192),
    ("interpreter_frame.previous", 232),
    ("interpreter_frame.executable", 240),
    ("interpreter_frame.instr_ptr", 248),
    ("interpreter_frame.owner", 264),
    ("code_object.filename", 280),
    ("code_object.name", 288),
    ("code_object.co_code_adaptive", 344),
];
/// The bytes of `_Py_DebugOffsets` read: up to the last field above.
pub const BYTES: usize = 352;

/// Why an image's own offsets refuse the table.
#[derive(Debug, PartialEq, Eq)]
pub enum Disagreement {
    /// The image is not the version its table was chosen for.
    Version(u64),
    FreeThreaded,
    /// A field the image places elsewhere: its path, the table's offset, the image's.
    Field(&'static str, u64, u64),
}

impl std::fmt::Display for Disagreement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Version(hex) => write!(f, "its _Py_DebugOffsets state version {hex:#x}"),
            Self::FreeThreaded => write!(f, "its _Py_DebugOffsets state a free-threaded build"),
            Self::Field(path, table, image) => {
                write!(f, "its _Py_DebugOffsets place {path} at {image}, not {table}")
            }
        }
    }
}

/// Compares `layout` with the `_Py_DebugOffsets` at the start of `runtime` (the image's bytes of
/// `_PyRuntime`). Bytes that do not start with the cookie carry none: nothing to compare.
pub fn check(layout: &Layout, runtime: &[u8]) -> Result<(), Disagreement> {
    if runtime.get(..COOKIE.len()) != Some(COOKIE) {
        return Ok(());
    }
    let at = |position: usize| {
        runtime.get(position..position + 8).map_or(u64::MAX, |b| u64::from_le_bytes(b.try_into().unwrap()))
    };
    let version = at(VERSION);
    if version >> 24 != 3 || (version >> 16) & 0xff != u64::from(layout.version.0) {
        return Err(Disagreement::Version(version));
    }
    if at(FREE_THREADED) != 0 {
        return Err(Disagreement::FreeThreaded);
    }
    for (path, position) in FIELDS {
        let table = stated(layout, path);
        let image = at(position);
        if image != table {
            return Err(Disagreement::Field(path, table, image));
        }
    }
    Ok(())
}

/// What `layout` says of the field at `path` of `_Py_DebugOffsets`.
fn stated(layout: &Layout, path: &str) -> u64 {
    let k = &layout.kernel;
    let code_adaptive = match layout.instruction {
        Instruction::Pointer { code_adaptive } => code_adaptive,
        Instruction::LastiBytes | Instruction::LastiUnits => u32::MAX,
    };
    let offset = match path {
        // `interpreters.main` follows `interpreters.head`, a pointer.
        "runtime_state.interpreters_head" => k.runtime_main_interpreter - 8,
        "interpreter_state.threads_head" => k.interpreter_threads,
        "thread_state.next" => k.thread_next,
        "thread_state.current_frame" => k.thread_frame,
        "thread_state.thread_id" => k.thread_id,
        "interpreter_frame.previous" => k.frame_back,
        "interpreter_frame.executable" => k.frame_code,
        "interpreter_frame.instr_ptr" => k.frame_instr,
        "interpreter_frame.owner" => k.frame_owner,
        "code_object.filename" => layout.code.filename,
        "code_object.name" => layout.code.name,
        "code_object.co_code_adaptive" => code_adaptive,
        _ => unreachable!("a field of FIELDS without a counterpart: {path}"),
    };
    u64::from(offset)
}

#[cfg(test)]
mod tests {
    use super::super::layout::{self, Version};
    use super::*;

    /// `_Py_DebugOffsets` as the table would write them.
    fn agreeing(layout: &Layout) -> Vec<u8> {
        let mut bytes = vec![0; BYTES];
        bytes[..8].copy_from_slice(COOKIE);
        let hex = 0x0300_00f0_u64 | (u64::from(layout.version.0) << 16);
        bytes[VERSION..VERSION + 8].copy_from_slice(&hex.to_le_bytes());
        for (path, position) in FIELDS {
            bytes[position..position + 8].copy_from_slice(&stated(layout, path).to_le_bytes());
        }
        bytes
    }

    #[test]
    fn a_moved_field_is_named() {
        let layout = layout::layout(Version(13)).unwrap();
        assert_eq!(check(layout, &agreeing(layout)), Ok(()));
        for (path, position) in FIELDS {
            let mut bytes = agreeing(layout);
            bytes[position] ^= 0x10;
            let Err(Disagreement::Field(named, _, _)) = check(layout, &bytes) else { panic!("{path}") };
            assert_eq!(named, path);
        }
    }

    #[test]
    fn another_version_or_a_free_threaded_build_is_refused() {
        let layout = layout::layout(Version(13)).unwrap();
        let mut bytes = agreeing(layout);
        bytes[VERSION + 2] = 14;
        assert!(matches!(check(layout, &bytes), Err(Disagreement::Version(_))));
        let mut bytes = agreeing(layout);
        bytes[FREE_THREADED] = 1;
        assert_eq!(check(layout, &bytes), Err(Disagreement::FreeThreaded));
    }

    #[test]
    fn short_or_cookieless_bytes() {
        let layout = layout::layout(Version(13)).unwrap();
        assert_eq!(check(layout, &[0; BYTES]), Ok(()));
        assert!(check(layout, &agreeing(layout)[..100]).is_err());
    }
}
