//! Reading V8's heap objects from outside: a frame's `JSFunction` to its `SharedFunctionInfo`,
//! and from there the function's name (a string, or its `ScopeInfo`'s), its start position, and
//! its `Script`'s name and source (for the line of that position). Everything is the target's:
//! every pointer checked (tagged, in the user half), every object's type checked by its map
//! before it is read as that type, strings bounded in length and in the depth of their parts.
use super::layout::Layout;
use crate::runtimes::memory::{ReadMemory, USER_END};

/// Longest name taken, in characters; longer ones are cut.
pub const MAX_NAME: usize = 512;
/// Parts of a cons string followed at most, and the depth of thin strings.
const MAX_STRING_PARTS: usize = 16;
/// Most characters of a script's source read to find a position's line: a position past it has
/// no line.
pub const MAX_SOURCE: u64 = 1 << 20;
/// Slots of a `ScopeInfo` read at most, and those looked at past its context locals for the
/// function's name.
const MAX_SCOPE_SLOTS: usize = 256;
const NAME_SLOTS: usize = 8;
/// Context locals past which V8 keeps their names in a hash table of one slot.
const MAX_INLINED_LOCAL_NAMES: usize = 75;

/// The address of the object a tagged pointer points to.
pub(crate) fn untag(tagged: u64) -> Option<u64> {
    (tagged & 3 == 1 && tagged > 1 && tagged < USER_END).then(|| tagged - 1)
}

/// The value of a small integer (the upper half of a word, on 64-bit V8 without pointer
/// compression).
pub(crate) fn smi(word: u64) -> Option<i64> {
    (word & 0xffff_ffff == 0).then_some(i64::from((word >> 32) as i32))
}

/// What a function's frames are named by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FunctionInfo {
    pub name: String,
    pub file: String,
    /// The line of its start (1-based; 0 when not known).
    pub line: u32,
    /// The column of its start on that line (1-based; 0 when not known), as V8's perf map says
    /// it: where its parameter list opens.
    pub column: u32,
    /// A closure of V8's builtins (no script, no name), whose frames the builtin it runs names.
    pub builtin: bool,
}

impl FunctionInfo {
    /// About the bytes it holds.
    pub(crate) fn size(&self) -> usize {
        64 + self.name.len() + self.file.len()
    }
}

/// A reader of one process's heap with a layout.
pub(crate) struct Heap<'a, 'b> {
    pub layout: &'a Layout,
    pub read: &'a mut ReadMemory<'b>,
}

impl Heap<'_, '_> {
    pub(crate) fn word(&mut self, address: u64) -> Option<u64> {
        let mut raw = [0u8; 8];
        (self.read)(address, &mut raw).then(|| u64::from_le_bytes(raw))
    }

    fn bytes(&mut self, address: u64, len: usize) -> Option<Vec<u8>> {
        let mut bytes = vec![0u8; len];
        (self.read)(address, &mut bytes).then_some(bytes)
    }

    /// The address of the map of the object at `object`.
    pub(crate) fn map(&mut self, object: u64) -> Option<u64> {
        untag(self.word(object.checked_add(self.layout.heap_object_map)?)?)
    }

    /// The instance type a map says.
    pub(crate) fn map_type(&mut self, map: u64) -> Option<u16> {
        let mut raw = [0u8; 2];
        (self.read)(map.checked_add(self.layout.map_instance_type)?, &mut raw)
            .then(|| u16::from_le_bytes(raw))
    }

    /// The instance type of the object at `object`.
    pub(crate) fn object_type(&mut self, object: u64) -> Option<u16> {
        let map = self.map(object)?;
        self.map_type(map)
    }

    /// The string at tagged `tagged`, up to [`MAX_NAME`] characters; `None` when it is not a
    /// string or cannot be read whole.
    pub(crate) fn string(&mut self, tagged: u64) -> Option<String> {
        let mut text = String::new();
        let mut pending = vec![tagged];
        let mut parts = 0;
        while let Some(tagged) = pending.pop() {
            parts += 1;
            if parts > MAX_STRING_PARTS {
                return None;
            }
            let object = untag(tagged)?;
            let kind = self.object_type(object)?;
            let tags = self.layout.strings;
            if kind >= self.layout.types.first_nonstring {
                return None;
            }
            match kind & tags.representation_mask {
                r if r == tags.seq => {
                    let one_byte = kind & tags.encoding_mask == tags.one_byte;
                    let left = MAX_NAME.saturating_sub(text.chars().count());
                    let (chars, _) = self.seq_chars(object, one_byte, left as u64)?;
                    text.push_str(&chars);
                }
                r if r == tags.cons => {
                    let second = self.word(object.checked_add(self.layout.cons_second)?)?;
                    let first = self.word(object.checked_add(self.layout.cons_first)?)?;
                    pending.push(second);
                    pending.push(first);
                }
                r if r == tags.thin => pending.push(self.word(object.checked_add(self.layout.thin_actual)?)?),
                // External and sliced strings are not read.
                _ => return None,
            }
            if text.chars().count() >= MAX_NAME {
                break;
            }
        }
        Some(text)
    }

    /// Up to `max` characters of the sequential string at `object`, and its length.
    fn seq_chars(&mut self, object: u64, one_byte: bool, max: u64) -> Option<(String, u64)> {
        let mut raw = [0u8; 4];
        if !(self.read)(object.checked_add(self.layout.string_length)?, &mut raw) {
            return None;
        }
        let length = u64::from(u32::from_le_bytes(raw));
        let count = length.min(max);
        if one_byte {
            let bytes = self.bytes(object.checked_add(self.layout.seq_one_byte_chars)?, count as usize)?;
            Some((bytes.iter().map(|&b| char::from(b)).collect(), length))
        } else {
            let bytes =
                self.bytes(object.checked_add(self.layout.seq_two_byte_chars)?, 2 * count as usize)?;
            let units = bytes.as_chunks::<2>().0.iter().map(|pair| u16::from_le_bytes(*pair));
            Some((
                char::decode_utf16(units).map(|c| c.unwrap_or(char::REPLACEMENT_CHARACTER)).collect(),
                length,
            ))
        }
    }

    /// What the `SharedFunctionInfo` at `shared` (checked to be one by its caller) says, given
    /// its name-or-scope-info and script fields.
    pub(crate) fn function(&mut self, name_or_scope_info: u64, script: u64) -> Option<FunctionInfo> {
        let types = self.layout.types;
        let (name, start) = match untag(name_or_scope_info).and_then(|object| self.object_type(object)) {
            Some(kind) if kind == types.scope_info => self.scope_info(untag(name_or_scope_info)?),
            Some(kind) if kind < types.first_nonstring => (self.string(name_or_scope_info), None),
            // A function given no name (a small integer: none).
            _ if smi(name_or_scope_info).is_some() => (None, None),
            _ => return None,
        };
        let name = name.filter(|name| !name.is_empty());
        let (file, source, scripted) = match untag(script) {
            Some(object) if self.object_type(object) == Some(types.script) => {
                let file = self.word(object + self.layout.script_name).and_then(|name| self.string(name));
                (file.unwrap_or_default(), self.word(object + self.layout.script_source), true)
            }
            _ => (String::new(), None, false),
        };
        let builtin = !scripted && name.is_none();
        let name = name.unwrap_or_else(|| "(anonymous)".to_owned());
        let (line, column) = match (start, source) {
            (Some(start), Some(source)) => self.position_of(source, start).unwrap_or((0, 0)),
            _ => (0, 0),
        };
        Some(FunctionInfo { name, file, line, column, builtin })
    }

    /// The function's name and start position in the `ScopeInfo` at `object`: the first string
    /// past its context locals, and the first pair of increasing small integers after it (or its
    /// fixed position slots, from V8 12.8.44).
    fn scope_info(&mut self, object: u64) -> (Option<String>, Option<u64>) {
        let slots = self.layout.scope_info;
        let data = object + 8;
        let Some(head) = self.bytes(data, 8 * (slots.first_vars.max(slots.context_locals + 1) + 2)) else {
            return (None, None);
        };
        let slot = |bytes: &[u8], index: usize| {
            bytes.get(8 * index..8 * index + 8).map(|w| u64::from_le_bytes(w.try_into().unwrap_or_default()))
        };
        let Some(locals) =
            slot(&head, slots.context_locals).and_then(smi).and_then(|n| usize::try_from(n).ok())
        else {
            return (None, None);
        };
        let first = if locals > MAX_INLINED_LOCAL_NAMES {
            slots.first_vars + 1 + locals
        } else {
            slots.first_vars + 2 * locals
        };
        let count = first + NAME_SLOTS;
        if count > MAX_SCOPE_SLOTS {
            return (None, None);
        }
        let Some(all) = self.bytes(data, 8 * count) else { return (None, None) };
        let fixed = slots.fixed_positions.then(|| slot(&all, 3).and_then(smi)).flatten();
        let mut name = None;
        let mut start = fixed.and_then(|at| u64::try_from(at).ok());
        let mut previous: Option<i64> = None;
        for index in first..count {
            let Some(word) = slot(&all, index) else { break };
            if name.is_none() && untag(word).is_some() {
                name = self.string(word);
                previous = None;
                continue;
            }
            if name.is_some() && start.is_none() {
                let value = smi(word);
                if let (Some(a), Some(b)) = (previous, value)
                    && 0 <= a
                    && a < b
                {
                    start = u64::try_from(a).ok();
                    break;
                }
                previous = value;
            }
            if name.is_some() && start.is_some() {
                break;
            }
        }
        (name, start)
    }

    /// The line and column (1-based) of position `at` of the source string `source`, counting
    /// its line breaks (the source's first [`MAX_SOURCE`] characters at most).
    pub(crate) fn position_of(&mut self, source: u64, at: u64) -> Option<(u32, u32)> {
        if at >= MAX_SOURCE {
            return None;
        }
        let object = untag(source)?;
        let kind = self.object_type(object)?;
        let tags = self.layout.strings;
        if kind >= self.layout.types.first_nonstring || kind & tags.representation_mask != tags.seq {
            return None;
        }
        let one_byte = kind & tags.encoding_mask == tags.one_byte;
        let (chars, length) = self.seq_chars_raw(object, one_byte, at)?;
        if at > length {
            return None;
        }
        let newline = u16::from(b'\n');
        let line = 1 + chars.iter().filter(|&&c| c == newline).count();
        let line_start = chars.iter().rposition(|&c| c == newline).map_or(0, |at| at + 1);
        let column = 1 + chars.len() - line_start;
        Some((u32::try_from(line).ok()?, u32::try_from(column).ok()?))
    }

    /// The first `count` code units of the sequential string at `object`, and its length.
    fn seq_chars_raw(&mut self, object: u64, one_byte: bool, count: u64) -> Option<(Vec<u16>, u64)> {
        let mut raw = [0u8; 4];
        if !(self.read)(object.checked_add(self.layout.string_length)?, &mut raw) {
            return None;
        }
        let length = u64::from(u32::from_le_bytes(raw));
        let count = count.min(length) as usize;
        if one_byte {
            let bytes = self.bytes(object.checked_add(self.layout.seq_one_byte_chars)?, count)?;
            Some((bytes.into_iter().map(u16::from).collect(), length))
        } else {
            let bytes = self.bytes(object.checked_add(self.layout.seq_two_byte_chars)?, 2 * count)?;
            Some((bytes.as_chunks::<2>().0.iter().map(|pair| u16::from_le_bytes(*pair)).collect(), length))
        }
    }
}
