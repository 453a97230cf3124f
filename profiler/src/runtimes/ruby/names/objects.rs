//! Ruby objects in the target's memory: their headers and type tags, strings and arrays
//! (docs/ruby-layouts.md §4.3). What a reader is given is a value the target wrote: it is checked
//! to be an object of the expected type before its fields are believed, and lengths are bounded
//! before anything is read by them.
use anyhow::{Context as _, Result, bail, ensure};

use crate::runtimes::ruby::layout::{
    ARRAY_EMBEDDED, ARRAY_EMBEDDED_ELEMENTS, ARRAY_EMBEDDED_LENGTH_SHIFT, ARRAY_LENGTH, ARRAY_POINTER,
    EmbeddedLength, IMEMO_TYPE_MASK, IMEMO_TYPE_SHIFT, Layout, STRING_EMBEDDED_LENGTH_MASK,
    STRING_EMBEDDED_LENGTH_SHIFT, STRING_LENGTH, STRING_NOEMBED, STRING_POINTER, T_ARRAY, T_IMEMO, T_STRING,
    TYPE_MASK,
};

/// Strings longer than this, in bytes, are cut, ending with [`CUT`].
pub(super) const MAX_STRING_BYTES: u64 = 4096;
/// The last character of a cut string.
pub(super) const CUT: char = '…';

/// The smallest slot of Ruby's heap: every object has this much, and the fields read of
/// strings, arrays, method entries and instruction sequences are within it.
pub(super) const OBJECT_BYTES: usize = 40;
/// Heap objects are above the first page; values below it are special constants (`nil`,
/// `false`, small integers and symbols) or garbage.
const LOWEST_OBJECT: u64 = 4096;

/// The first [`OBJECT_BYTES`] of an object.
pub(super) type Header = [u8; OBJECT_BYTES];

/// The target's memory, read through the reader given with the release's layout.
pub(super) struct Heap<'a> {
    read: &'a mut (dyn FnMut(u64, &mut [u8]) -> Result<()> + 'a),
    pub layout: &'a Layout,
}

impl<'a> Heap<'a> {
    pub(super) fn new(
        read: &'a mut (dyn FnMut(u64, &mut [u8]) -> Result<()> + 'a),
        layout: &'a Layout,
    ) -> Self {
        Self { read, layout }
    }

    /// Fills `buffer` from `addr`; nothing is asked of the reader for nothing.
    pub(super) fn fill(&mut self, addr: u64, buffer: &mut [u8]) -> Result<()> {
        let len = buffer.len();
        if len == 0 {
            return Ok(());
        }
        ensure!(
            addr.checked_add(len as u64).is_some(),
            "{len} bytes at {addr:#x} run past the end of memory"
        );
        (self.read)(addr, buffer).with_context(|| format!("reading {len} bytes at {addr:#x}"))
    }

    pub(super) fn array<const N: usize>(&mut self, addr: u64) -> Result<[u8; N]> {
        let mut bytes = [0; N];
        self.fill(addr, &mut bytes)?;
        Ok(bytes)
    }

    pub(super) fn word(&mut self, addr: u64) -> Result<u64> {
        self.array(addr).map(u64::from_le_bytes)
    }

    /// `len` bytes at `addr`: the caller bounds `len`.
    pub(super) fn bytes(&mut self, addr: u64, len: usize) -> Result<Vec<u8>> {
        let mut bytes = vec![0; len];
        self.fill(addr, &mut bytes)?;
        Ok(bytes)
    }

    /// The header of the object `value`, after checking that it can be one.
    pub(super) fn header(&mut self, value: u64) -> Result<Header> {
        ensure!(value >= LOWEST_OBJECT && value.is_multiple_of(8), "{value:#x} is no object");
        self.array(value)
    }

    /// The header of the imemo `value`, checked to be of imemo type `imemo`.
    pub(super) fn imemo(&mut self, value: u64, imemo: u64) -> Result<Header> {
        let header = self.header(value)?;
        expect_type(value, &header, &[T_IMEMO])?;
        let found = (flags(&header) >> IMEMO_TYPE_SHIFT) & IMEMO_TYPE_MASK;
        ensure!(found == imemo, "the imemo at {value:#x} is of imemo type {found}, not {imemo}");
        Ok(header)
    }

    /// The String `value`, its invalid UTF-8 replaced, cut past [`MAX_STRING_BYTES`].
    pub(super) fn string(&mut self, value: u64) -> Result<String> {
        let header = self.header(value)?;
        self.string_of(value, &header)
    }

    /// The String `value`, whose header is `header`.
    pub(super) fn string_of(&mut self, value: u64, header: &Header) -> Result<String> {
        let (bytes, cut) = self.string_bytes_of(value, header)?;
        let mut text = String::from_utf8_lossy(&bytes).into_owned();
        if cut {
            text.push(CUT);
        }
        Ok(text)
    }

    /// The bytes of the String `value` (at most [`MAX_STRING_BYTES`]), and whether it has more.
    pub(super) fn string_bytes(&mut self, value: u64) -> Result<(Vec<u8>, bool)> {
        let header = self.header(value)?;
        self.string_bytes_of(value, &header)
    }

    fn string_bytes_of(&mut self, value: u64, header: &Header) -> Result<(Vec<u8>, bool)> {
        expect_type(value, header, &[T_STRING])?;
        let flags = flags(header);
        let layout = &self.layout.string;
        let (len, data) = if flags & STRING_NOEMBED != 0 {
            let len = u64_at(header, STRING_LENGTH);
            ensure!(i64::try_from(len).is_ok(), "the string at {value:#x} is {} bytes long", len as i64);
            (len, u64_at(header, STRING_POINTER))
        } else {
            let len = match layout.embedded_length {
                EmbeddedLength::InFlags => {
                    (flags >> STRING_EMBEDDED_LENGTH_SHIFT) & STRING_EMBEDDED_LENGTH_MASK
                }
                EmbeddedLength::Field => u64_at(header, STRING_LENGTH),
            };
            ensure!(len <= layout.max_embedded, "the embedded string at {value:#x} is {len} bytes long");
            // Short ones came with the header.
            let at = layout.embedded_data as usize;
            if let Some(inline) = header.get(at..at + len as usize) {
                return Ok((inline.to_vec(), false));
            }
            (len, value.wrapping_add(layout.embedded_data))
        };
        let kept = len.min(MAX_STRING_BYTES);
        Ok((self.bytes(data, kept as usize)?, kept != len))
    }

    /// Element `index` of the Array `value`, whose header is `header`.
    pub(super) fn array_entry_of(&mut self, value: u64, header: &Header, index: u64) -> Result<u64> {
        expect_type(value, header, &[T_ARRAY])?;
        let flags = flags(header);
        let (len, elements) = if flags & ARRAY_EMBEDDED != 0 {
            let len = (flags >> ARRAY_EMBEDDED_LENGTH_SHIFT) & self.layout.array_embedded_length_mask;
            (len, value.wrapping_add(ARRAY_EMBEDDED_ELEMENTS))
        } else {
            (u64_at(header, ARRAY_LENGTH), u64_at(header, ARRAY_POINTER))
        };
        // A heap length is a `long`: a negative one is past every index.
        ensure!(index < len && i64::try_from(len).is_ok(), "no element {index} in the array at {value:#x}");
        let offset = index.checked_mul(8).context("an index past the end of memory")?;
        self.word(elements.wrapping_add(offset))
    }

    /// Element `index` of the Array `value`.
    pub(super) fn array_entry(&mut self, value: u64, index: u64) -> Result<u64> {
        let header = self.header(value)?;
        self.array_entry_of(value, &header, index)
    }
}

/// An object's flags.
pub(super) fn flags(header: &Header) -> u64 {
    u64_at(header, 0)
}

/// An object's type tag (`T_STRING`, ...).
pub(super) fn type_of(header: &Header) -> u64 {
    flags(header) & TYPE_MASK
}

/// Fails unless the object `value`, whose header is `header`, is of one of `types`.
pub(super) fn expect_type(value: u64, header: &Header, types: &[u64]) -> Result<()> {
    let found = type_of(header);
    if !types.contains(&found) {
        bail!("the object at {value:#x} is of type {found:#x}, not {}", type_names(types));
    }
    Ok(())
}

fn type_names(types: &[u64]) -> String {
    types.iter().map(|found| format!("{found:#x}")).collect::<Vec<_>>().join(" or ")
}

/// The little-endian `N` bytes at `offset` of bytes read to hold them.
fn array_at<const N: usize>(bytes: &[u8], offset: u64) -> [u8; N] {
    let start = offset as usize;
    bytes[start..start + N].try_into().expect("the bytes were read to hold the field")
}

pub(super) fn u64_at(bytes: &[u8], offset: u64) -> u64 {
    u64::from_le_bytes(array_at(bytes, offset))
}

pub(super) fn u32_at(bytes: &[u8], offset: u64) -> u32 {
    u32::from_le_bytes(array_at(bytes, offset))
}

pub(super) fn i32_at(bytes: &[u8], offset: u64) -> i32 {
    i32::from_le_bytes(array_at(bytes, offset))
}
