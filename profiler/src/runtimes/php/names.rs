//! What names a PHP frame, read from the target's memory by the addresses the kernel's walk
//! recorded: the function (`zend_function`) its name, class and file, and the line of an op.
//! Everything read is the target's: types are checked, lengths bounded, ops checked to be the
//! function's before their line is believed.
use anyhow::{Result, bail, ensure};

use super::layout::{
    CLASS_NAME, EVAL_CODE, FUNCTION_NAME, FUNCTION_SCOPE, FUNCTION_TYPE, INTERNAL_FUNCTION, Layout, OP_BYTES,
    OP_LINE, STRING_BYTES, STRING_LENGTH, USER_FUNCTION,
};

/// `zend_string`'s type (`gc.u.type_info`'s low byte), its type bits, and a string's.
const STRING_TYPE_INFO: usize = 4;
const TYPE_MASK: u8 = 0xf;
const IS_STRING: u8 = 6;

/// Names longer than this, in bytes, are cut, ending with `…`.
const MAX_NAME_BYTES: u64 = 1024;
/// Paths longer than this are cut too (`PATH_MAX`).
const MAX_PATH_BYTES: u64 = 4096;
/// Ops of a function at most: more is no function.
const MAX_OPS: u64 = 1 << 24;

/// A function as named in a profile.
#[derive(Debug)]
pub(super) struct Function {
    /// `Outer\Worker::alpha`, `array_map`, or for a file's own code what ran it (`{main}`).
    pub name: String,
    /// The file of PHP code; empty for C code.
    pub file: String,
    pub first_line: u32,
    /// Its ops, for the line of an op (`None` for C code).
    ops: Option<(u64, u64)>,
}

impl Function {
    /// About the bytes it holds, for a cache's budget.
    pub(super) fn size(&self) -> usize {
        size_of::<Self>() + self.name.len() + self.file.len()
    }
}

/// What runs a file's own code, by how it was entered: the script, or an `include` or `eval`.
pub(super) enum FileCode {
    Script,
    Included,
}

/// Reads the function at `func` with `read`; `file_code` says what ran it if it is a file's own
/// code.
pub(super) fn read_function(
    read: &mut dyn FnMut(u64, &mut [u8]) -> Result<()>,
    layout: &Layout,
    func: u64,
    file_code: FileCode,
) -> Result<Function> {
    let mut head = [0u8; 24];
    read(func, &mut head)?;
    let kind = head[FUNCTION_TYPE as usize];
    let name = word(&head, FUNCTION_NAME);
    let scope = word(&head, FUNCTION_SCOPE);
    let name = match name {
        0 if kind == EVAL_CODE => "{eval}".to_owned(),
        0 => match file_code {
            FileCode::Script => "{main}".to_owned(),
            FileCode::Included => "{include}".to_owned(),
        },
        name => string(read, name, MAX_NAME_BYTES)?,
    };
    let name = match scope {
        0 => name,
        scope => {
            let class = read_word(read, scope + CLASS_NAME)?;
            format!("{}::{name}", string(read, class, MAX_NAME_BYTES)?)
        }
    };
    match kind {
        INTERNAL_FUNCTION => Ok(Function { name, file: String::new(), first_line: 0, ops: None }),
        USER_FUNCTION | EVAL_CODE => {
            let file = read_word(read, func + layout.filename)?;
            let file = string(read, file, MAX_PATH_BYTES)?;
            let first_line = read_u32(read, func + layout.line_start)?;
            let count = u64::from(read_u32(read, func + layout.ops_count)?);
            ensure!(count <= MAX_OPS, "the function at {func:#x} has {count} ops");
            let ops = read_word(read, func + layout.ops)?;
            Ok(Function { name, file, first_line, ops: Some((ops, count)) })
        }
        kind => bail!("the function at {func:#x} is of type {kind}"),
    }
}

/// The line of the op at `opline` of `function`, if it is one of its ops.
pub(super) fn line(
    read: &mut dyn FnMut(u64, &mut [u8]) -> Result<()>,
    function: &Function,
    opline: u64,
) -> Option<u32> {
    let (ops, count) = function.ops?;
    let offset = opline.checked_sub(ops)?;
    if offset % OP_BYTES != 0 || offset / OP_BYTES >= count {
        return None;
    }
    read_u32(read, opline + OP_LINE).ok().filter(|&line| line > 0)
}

fn word(bytes: &[u8], at: u64) -> u64 {
    let at = at as usize;
    u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap_or_default())
}

fn read_word(read: &mut dyn FnMut(u64, &mut [u8]) -> Result<()>, addr: u64) -> Result<u64> {
    let mut bytes = [0u8; 8];
    read(addr, &mut bytes)?;
    Ok(u64::from_le_bytes(bytes))
}

fn read_u32(read: &mut dyn FnMut(u64, &mut [u8]) -> Result<()>, addr: u64) -> Result<u32> {
    let mut bytes = [0u8; 4];
    read(addr, &mut bytes)?;
    Ok(u32::from_le_bytes(bytes))
}

/// The `zend_string` at `string`, its invalid UTF-8 replaced, cut past `max` bytes.
fn string(read: &mut dyn FnMut(u64, &mut [u8]) -> Result<()>, string: u64, max: u64) -> Result<String> {
    ensure!(string != 0, "no string");
    let mut head = [0u8; STRING_BYTES as usize];
    read(string, &mut head)?;
    // A string freed since (a request's code, freed at its end) has the allocator's pointers in
    // its type and at its end.
    ensure!(head[STRING_TYPE_INFO] & TYPE_MASK == IS_STRING, "{string:#x} is no string");
    let len = word(&head, STRING_LENGTH);
    let mut bytes = vec![0u8; len.min(max) as usize];
    read(string + STRING_BYTES, &mut bytes)?;
    ensure!(!bytes.iter().any(u8::is_ascii_control), "the string at {string:#x} holds control characters");
    let mut text = String::from_utf8_lossy(&bytes).into_owned();
    if len > max {
        text.push('…');
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::runtimes::php::layout::layout;

    /// A target's memory: bytes by address.
    #[derive(Default)]
    struct Memory(BTreeMap<u64, Vec<u8>>);

    impl Memory {
        fn put(&mut self, addr: u64, bytes: &[u8]) {
            self.0.insert(addr, bytes.to_vec());
        }

        fn string(&mut self, addr: u64, text: &str) -> u64 {
            let mut bytes = vec![0u8; 24];
            bytes[STRING_TYPE_INFO] = IS_STRING;
            bytes[16..24].copy_from_slice(&(text.len() as u64).to_le_bytes());
            bytes.extend_from_slice(text.as_bytes());
            self.put(addr, &bytes);
            addr
        }

        fn read(&self, addr: u64, buf: &mut [u8]) -> Result<()> {
            let (start, bytes) =
                self.0.range(..=addr).next_back().ok_or_else(|| anyhow::anyhow!("unmapped"))?;
            let at = (addr - start) as usize;
            let slice = bytes.get(at..at + buf.len()).ok_or_else(|| anyhow::anyhow!("unmapped"))?;
            buf.copy_from_slice(slice);
            Ok(())
        }
    }

    /// A user function `Outer\Worker::alpha` of /app.php, first line 10, with 3 ops at lines
    /// 11, 12, 13, laid out for 8.4.
    fn alpha(memory: &mut Memory) -> u64 {
        let layout = layout(8, 4).unwrap();
        let name = memory.string(0x1000, "alpha");
        let class_name = memory.string(0x2000, "Outer\\Worker");
        let mut class = vec![0u8; 16];
        class[8..16].copy_from_slice(&class_name.to_le_bytes());
        memory.put(0x3000, &class);
        let file = memory.string(0x4000, "/app.php");
        let mut ops = vec![0u8; 96];
        for (i, line) in [11u32, 12, 13].iter().enumerate() {
            ops[i * 32 + 24..i * 32 + 28].copy_from_slice(&line.to_le_bytes());
        }
        memory.put(0x5000, &ops);
        let mut func = vec![0u8; 256];
        func[0] = USER_FUNCTION;
        func[8..16].copy_from_slice(&name.to_le_bytes());
        func[16..24].copy_from_slice(&0x3000u64.to_le_bytes());
        func[layout.ops_count as usize..][..4].copy_from_slice(&3u32.to_le_bytes());
        func[layout.ops as usize..][..8].copy_from_slice(&0x5000u64.to_le_bytes());
        func[layout.filename as usize..][..8].copy_from_slice(&file.to_le_bytes());
        func[layout.line_start as usize..][..4].copy_from_slice(&10u32.to_le_bytes());
        memory.put(0x6000, &func);
        0x6000
    }

    #[test]
    fn a_method_is_named_by_its_class_at_the_line_of_its_op() {
        let mut memory = Memory::default();
        let func = alpha(&mut memory);
        let mut read = |addr: u64, buf: &mut [u8]| memory.read(addr, buf);
        let function = read_function(&mut read, layout(8, 4).unwrap(), func, FileCode::Script).unwrap();
        assert_eq!(
            (function.name.as_str(), function.file.as_str(), function.first_line),
            ("Outer\\Worker::alpha", "/app.php", 10)
        );
        assert_eq!(line(&mut read, &function, 0x5000 + 32), Some(12));
        assert_eq!(line(&mut read, &function, 0x5000 + 16), None, "not an op's start");
        assert_eq!(line(&mut read, &function, 0x5000 + 96), None, "past its ops");
        assert_eq!(line(&mut read, &function, 0x4000), None, "before its ops");
    }

    /// A request's code freed at its end, under PHP 8.4's allocator: the name's string has a
    /// free-list pointer for its type and another at its end.
    #[test]
    fn a_freed_name_is_refused_not_read() {
        let layout = layout(8, 4).unwrap();
        let mut memory = Memory::default();
        let func = alpha(&mut memory);
        let mut read = |addr: u64, buf: &mut [u8]| memory.read(addr, buf);
        assert!(read_function(&mut read, layout, func, FileCode::Script).is_ok());
        let mut freed = Memory::default();
        alpha(&mut freed);
        freed
            .put(0x1000, &[[0x90, 0x1f, 0x5a, 0x3c, 0xd1, 0x7f, 0, 0].as_slice(), &[0; 16], b"alp"].concat());
        let mut read = |addr: u64, buf: &mut [u8]| freed.read(addr, buf);
        assert!(read_function(&mut read, layout, func, FileCode::Script).is_err(), "its type");
        freed.string(0x1000, "al\u{b}\u{1f}a");
        let mut read = |addr: u64, buf: &mut [u8]| freed.read(addr, buf);
        assert!(read_function(&mut read, layout, func, FileCode::Script).is_err(), "its bytes");
    }

    #[test]
    fn hostile_functions_are_refused_or_cut() {
        let mut memory = Memory::default();
        let func = alpha(&mut memory);
        // A name that says it is 2^40 bytes long is cut at its bound.
        let mut long = vec![0u8; 2048];
        long[STRING_TYPE_INFO] = IS_STRING;
        long[16..24].copy_from_slice(&(1u64 << 40).to_le_bytes());
        long[24..].fill(b'a');
        memory.put(0x1000, &long);
        let mut read = |addr: u64, buf: &mut [u8]| memory.read(addr, buf);
        let function = read_function(&mut read, layout(8, 4).unwrap(), func, FileCode::Script).unwrap();
        assert!(function.name.ends_with('…') && function.name.len() < 1100, "{}", function.name.len());
        // A type that is no function's.
        let mut memory = Memory::default();
        memory.put(0x6000, &[9u8; 256]);
        let mut read = |addr: u64, buf: &mut [u8]| memory.read(addr, buf);
        assert!(read_function(&mut read, layout(8, 4).unwrap(), 0x6000, FileCode::Script).is_err());
    }
}
