//! The offsets and sizes the Java frame walk reads, taken by name from a JVM's tables
//! ([`VmStructs`]): which of two variants a field has (JDK 17's absolute pointers or JDK 23+'s
//! offsets from the blob, its scopes kept in the blob or in separate immutable data) is chosen by
//! which name exists, never by the version. Every offset is checked to lie within its type, every
//! width to be one a read can take.
use std::ops::Range;

use anyhow::{Context as _, Result, bail, ensure};

use super::vm_structs::VmStructs;

/// Largest HotSpot type whose fields are read (`JavaThread`, the largest, is 2 216 bytes in 25).
const MAX_TYPE_SIZE: u64 = 64 * 1024;

/// An integer field: its offset in its object, its width in bytes, whether it is signed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Int {
    pub offset: usize,
    pub width: usize,
    pub signed: bool,
}

impl Int {
    /// The field in `object` (bytes read from the object's start), if they reach it.
    pub fn get(self, object: &[u8]) -> Option<i64> {
        let bytes = object.get(self.offset..self.offset.checked_add(self.width)?)?;
        let mut raw = [0u8; 8];
        raw[..self.width].copy_from_slice(bytes);
        let value = u64::from_le_bytes(raw);
        let unused = 64 - 8 * self.width as u32;
        Some(if self.signed { ((value << unused) as i64) >> unused } else { value as i64 })
    }

    /// The field as an address or size: refused when negative.
    pub fn get_u64(self, object: &[u8]) -> Option<u64> {
        u64::try_from(self.get(object)?).ok()
    }

    /// The end of the field: how much of an object must be read to get it.
    pub fn end(self) -> usize {
        self.offset + self.width
    }
}

/// Where a blob's code and its nmethod's debug information are: the two variants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlobLayout {
    /// JDK 17 to 22: absolute `_code_begin` / `_code_end`, scopes and PcDescs in the blob.
    Absolute {
        code_begin: Int,
        code_end: Int,
        scopes_data_begin: Int,
        metadata_offset: Int,
        dependencies_offset: Int,
    },
    /// JDK 23 on: offsets from the blob; PcDescs and scopes in `_immutable_data`, the metadata
    /// at `_mutable_data + _relocation_size`.
    Relative {
        code_offset: Int,
        data_offset: Int,
        immutable_data: Int,
        immutable_data_size: Int,
        scopes_data_offset: Int,
        mutable_data: Int,
        mutable_data_size: Int,
        relocation_size: Int,
    },
}

/// Where the debug information of an nmethod is: its PcDescs, its scopes and its metadata.
#[derive(Debug, PartialEq, Eq)]
pub struct DebugInfoRanges {
    pub descs: Range<u64>,
    pub scopes: Range<u64>,
    pub metadata: Range<u64>,
}

impl BlobLayout {
    /// Its fields, for how much of a blob's header to read.
    fn fields(&self) -> Vec<Int> {
        match *self {
            Self::Absolute {
                code_begin,
                code_end,
                scopes_data_begin,
                metadata_offset,
                dependencies_offset,
            } => {
                vec![code_begin, code_end, scopes_data_begin, metadata_offset, dependencies_offset]
            }
            Self::Relative {
                code_offset,
                data_offset,
                immutable_data,
                immutable_data_size,
                scopes_data_offset,
                mutable_data,
                mutable_data_size,
                relocation_size,
            } => vec![
                code_offset,
                data_offset,
                immutable_data,
                immutable_data_size,
                scopes_data_offset,
                mutable_data,
                mutable_data_size,
                relocation_size,
            ],
        }
    }

    /// The code of the blob at `blob`, whose header is `header`.
    pub fn code(&self, blob: u64, header: &[u8]) -> Option<Range<u64>> {
        match *self {
            Self::Absolute { code_begin, code_end, .. } => {
                Some(code_begin.get_u64(header)?..code_end.get_u64(header)?)
            }
            Self::Relative { code_offset, data_offset, .. } => Some(
                blob.checked_add(code_offset.get_u64(header)?)?
                    ..blob.checked_add(data_offset.get_u64(header)?)?,
            ),
        }
    }

    /// Where the debug information of the nmethod at `blob` is, from its header and the offset
    /// of its PcDescs (`scopes_pcs`); `None` when a field is past the header or an end overflows.
    pub fn debug_info(&self, blob: u64, header: &[u8], scopes_pcs: u64) -> Option<DebugInfoRanges> {
        let field = |int: Int| int.get_u64(header);
        let at = |base: u64, offset: u64| base.checked_add(offset);
        match *self {
            Self::Absolute { scopes_data_begin, metadata_offset, dependencies_offset, .. } => {
                let scopes_begin = field(scopes_data_begin)?;
                Some(DebugInfoRanges {
                    descs: at(blob, scopes_pcs)?..at(blob, field(dependencies_offset)?)?,
                    scopes: scopes_begin..at(blob, scopes_pcs)?,
                    metadata: at(blob, field(metadata_offset)?)?..scopes_begin,
                })
            }
            Self::Relative {
                immutable_data,
                immutable_data_size,
                scopes_data_offset,
                mutable_data,
                mutable_data_size,
                relocation_size,
                ..
            } => {
                let immutable = field(immutable_data)?;
                let scopes_data = at(immutable, field(scopes_data_offset)?)?;
                let mutable = field(mutable_data)?;
                Some(DebugInfoRanges {
                    descs: at(immutable, scopes_pcs)?..scopes_data,
                    scopes: scopes_data..at(immutable, field(immutable_data_size)?)?,
                    metadata: at(mutable, field(relocation_size)?)?..at(mutable, field(mutable_data_size)?)?,
                })
            }
        }
    }
}

/// Where an nmethod's deoptimization handlers are (absolute, or from the blob), and where a
/// frame being deoptimized keeps its original pc (from its stack pointer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deopt {
    pub handlers: [Int; 2],
    pub from_blob: bool,
    pub orig_pc_offset: Int,
}

/// Where a class's methods are (`InstanceKlass::_methods`, an array of `Method*`) and a method's
/// signature: for telling overloaded methods apart by their signatures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Overloads {
    pub klass_methods: Int,
    pub array_length: Int,
    pub array_data: usize,
    pub signature_index: Int,
}

/// Everything the walk reads of a JVM, by offset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Static variables: `CodeCache::_heaps`, `_low_bound`, `_high_bound`,
    /// `StubRoutines::_call_stub_return_address`.
    pub heaps: u64,
    pub low_bound: u64,
    pub high_bound: u64,
    pub call_stub_return_address: u64,
    pub array_len: Int,
    pub array_data: Int,
    pub heap_memory: usize,
    pub heap_segmap: usize,
    pub heap_log2_segment_size: Int,
    pub space_low: Int,
    pub space_high: Int,
    pub block_used: Int,
    /// `sizeof(HeapBlock)`: where the blob starts in its block.
    pub block_size: u64,
    pub blob_name: Int,
    pub blob_size: Int,
    pub blob_frame_complete: Int,
    pub blob_frame_size: Int,
    pub blob: BlobLayout,
    /// How much of a blob's header to read: the end of the furthest nmethod field used.
    pub nmethod_header: usize,
    pub nmethod_method: Int,
    pub nmethod_compile_id: Int,
    pub nmethod_scopes_pcs_offset: Int,
    /// `None` when the tables do not say (the walk then names deoptimized frames by their
    /// method alone).
    pub deopt: Option<Deopt>,
    pub method_const_method: Int,
    pub const_method_constants: Int,
    pub const_method_flags: Int,
    pub const_method_code_size: Int,
    pub const_method_name_index: Int,
    pub const_method_size: u64,
    pub has_line_table: u32,
    pub pool_holder: Int,
    pub pool_source_file_index: Int,
    pub pool_length: Int,
    pub pool_size: u64,
    pub klass_name: Int,
    /// `None` when the tables do not say: overloaded methods are then named alike.
    pub overloads: Option<Overloads>,
    pub symbol_length: Int,
    pub symbol_body: usize,
    /// UNSIGNED5's excluded bytes: 0 before JDK 20, 1 from it (JDK-8292758).
    pub unsigned5_base: u8,
}

impl Layout {
    /// The layout of the JVM whose tables are `vm`, read from a process whose JDK's major
    /// version is `major` (for UNSIGNED5 alone: nothing else in the tables tells it).
    pub fn new(vm: &VmStructs, major: u32) -> Result<Self> {
        let fields = Fields(vm);
        let int = |t: &str, f: &str| fields.int(t, f, false);
        let signed = |t: &str, f: &str| fields.int(t, f, true);
        let pointer = |t: &str, f: &str| fields.pointer(t, f);
        let statics = |t: &str, f: &str| {
            vm.static_address(t, f).with_context(|| format!("the tables have no static {t}::{f}"))
        };
        let compiled =
            if vm.field("CompiledMethod", "_method").is_some() { "CompiledMethod" } else { "nmethod" };
        let blob = if vm.field("CodeBlob", "_code_begin").is_some() {
            BlobLayout::Absolute {
                code_begin: pointer("CodeBlob", "_code_begin")?,
                code_end: pointer("CodeBlob", "_code_end")?,
                scopes_data_begin: pointer(compiled, "_scopes_data_begin")?,
                metadata_offset: int("nmethod", "_metadata_offset")?,
                dependencies_offset: int("nmethod", "_dependencies_offset")?,
            }
        } else {
            BlobLayout::Relative {
                code_offset: int("CodeBlob", "_code_offset")?,
                data_offset: int("CodeBlob", "_data_offset")?,
                immutable_data: pointer("nmethod", "_immutable_data")?,
                immutable_data_size: int("nmethod", "_immutable_data_size")?,
                scopes_data_offset: int("nmethod", "_scopes_data_offset")?,
                mutable_data: pointer("CodeBlob", "_mutable_data")?,
                mutable_data_size: int("CodeBlob", "_mutable_data_size")?,
                relocation_size: int("CodeBlob", "_relocation_size")?,
            }
        };
        let nmethod_method = pointer(compiled, "_method")?;
        let nmethod_compile_id = int("nmethod", "_compile_id")?;
        let nmethod_scopes_pcs_offset = int("nmethod", "_scopes_pcs_offset")?;
        let blob_ints = blob.fields();
        let deopt = (|| -> Result<Deopt> {
            let (handlers, from_blob) = match blob {
                BlobLayout::Absolute { .. } => (
                    [
                        pointer(compiled, "_deopt_handler_begin")?,
                        pointer(compiled, "_deopt_mh_handler_begin")?,
                    ],
                    false,
                ),
                BlobLayout::Relative { .. } => (
                    [int("nmethod", "_deopt_handler_offset")?, int("nmethod", "_deopt_mh_handler_offset")?],
                    true,
                ),
            };
            Ok(Deopt { handlers, from_blob, orig_pc_offset: int("nmethod", "_orig_pc_offset")? })
        })()
        .ok();
        let blob_name = pointer("CodeBlob", "_name")?;
        let blob_size = int("CodeBlob", "_size")?;
        let blob_frame_complete = signed("CodeBlob", "_frame_complete_offset")?;
        let blob_frame_size = signed("CodeBlob", "_frame_size")?;
        let nmethod_header =
            [nmethod_method, nmethod_compile_id, nmethod_scopes_pcs_offset, blob_name, blob_size]
                .into_iter()
                .chain([blob_frame_complete, blob_frame_size])
                .chain(blob_ints)
                .map(Int::end)
                .max()
                .unwrap_or(0);
        let (major_key, flag) = if vm.field("ConstMethod", "_flags._flags").is_some() {
            ("_flags._flags", "ConstMethodFlags::_misc_has_linenumber_table")
        } else {
            ("_flags", "ConstMethod::_has_linenumber_table")
        };
        let has_line_table = vm.int_constant(flag).with_context(|| format!("the tables have no {flag}"))?;
        ensure!(has_line_table > 0, "{flag} is {has_line_table}");
        let block_size = fields.size("HeapBlock")?;
        ensure!(block_size == 8 || block_size == 16, "HeapBlock is {block_size} bytes");
        Ok(Self {
            heaps: statics("CodeCache", "_heaps")?,
            low_bound: statics("CodeCache", "_low_bound")?,
            high_bound: statics("CodeCache", "_high_bound")?,
            call_stub_return_address: statics("StubRoutines", "_call_stub_return_address")?,
            array_len: int("GrowableArrayBase", "_len")?,
            array_data: pointer("GrowableArray<int>", "_data")?,
            heap_memory: fields.embedded("CodeHeap", "_memory")?,
            heap_segmap: fields.embedded("CodeHeap", "_segmap")?,
            heap_log2_segment_size: int("CodeHeap", "_log2_segment_size")?,
            space_low: pointer("VirtualSpace", "_low")?,
            space_high: pointer("VirtualSpace", "_high")?,
            block_used: int("HeapBlock::Header", "_used")?,
            block_size,
            blob_name,
            blob_size,
            blob_frame_complete,
            blob_frame_size,
            blob,
            nmethod_header,
            nmethod_method,
            nmethod_compile_id,
            nmethod_scopes_pcs_offset,
            deopt,
            method_const_method: pointer("Method", "_constMethod")?,
            const_method_constants: pointer("ConstMethod", "_constants")?,
            const_method_flags: int("ConstMethod", major_key)?,
            const_method_code_size: int("ConstMethod", "_code_size")?,
            const_method_name_index: int("ConstMethod", "_name_index")?,
            const_method_size: fields.size("ConstMethod")?,
            has_line_table: has_line_table as u32,
            pool_holder: pointer("ConstantPool", "_pool_holder")?,
            pool_source_file_index: int("ConstantPool", "_source_file_name_index")?,
            pool_length: int("ConstantPool", "_length")?,
            pool_size: fields.size("ConstantPool")?,
            klass_name: pointer("Klass", "_name")?,
            overloads: (|| -> Result<Overloads> {
                Ok(Overloads {
                    klass_methods: pointer("InstanceKlass", "_methods")?,
                    // The same for every `Array<T>`: its first member.
                    array_length: int("Array<int>", "_length")?,
                    array_data: fields.embedded("Array<Method*>", "_data")?,
                    signature_index: int("ConstMethod", "_signature_index")?,
                })
            })()
            .ok(),
            symbol_length: int("Symbol", "_length")?,
            symbol_body: fields.embedded("Symbol", "_body")?,
            unsigned5_base: u8::from(major >= 20),
        })
    }
}

/// Fields looked up by name and checked.
struct Fields<'a>(&'a VmStructs);

impl Fields<'_> {
    fn size(&self, type_name: &str) -> Result<u64> {
        let size =
            self.0.type_size(type_name).with_context(|| format!("the tables have no type {type_name}"))?;
        ensure!((1..=MAX_TYPE_SIZE).contains(&size), "{type_name} is {size} bytes");
        Ok(size)
    }

    /// The offset of a field within its type's size.
    fn offset(&self, type_name: &str, field: &str, width: u64) -> Result<(usize, Option<u64>)> {
        let (offset, size) = self
            .0
            .field(type_name, field)
            .with_context(|| format!("the tables have no {type_name}::{field}"))?;
        let type_size = self.size(type_name)?;
        if offset.checked_add(width).is_none_or(|end| end > type_size) {
            bail!("{type_name}::{field} at {offset} is outside its {type_size} bytes");
        }
        Ok((offset as usize, size))
    }

    fn int(&self, type_name: &str, field: &str, signed: bool) -> Result<Int> {
        let (_, size) = self.offset(type_name, field, 1)?;
        let width = size.with_context(|| format!("{type_name}::{field} has no integer type"))?;
        ensure!(matches!(width, 1 | 2 | 4 | 8), "{type_name}::{field} is {width} bytes wide");
        let (offset, _) = self.offset(type_name, field, width)?;
        Ok(Int { offset, width: width as usize, signed })
    }

    fn pointer(&self, type_name: &str, field: &str) -> Result<Int> {
        let (offset, _) = self.offset(type_name, field, 8)?;
        Ok(Int { offset, width: 8, signed: false })
    }

    /// A field that is an object in its own (`CodeHeap::_memory`, a `VirtualSpace`).
    fn embedded(&self, type_name: &str, field: &str) -> Result<usize> {
        Ok(self.offset(type_name, field, 0)?.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ints_of_each_width_and_sign() {
        let bytes = [0xff, 0xff, 0x34, 0x12, 0xfe, 0xff, 0xff, 0xff];
        let int = |offset, width, signed| Int { offset, width, signed }.get(&bytes);
        assert_eq!(int(0, 2, false), Some(0xffff));
        assert_eq!(int(0, 2, true), Some(-1));
        assert_eq!(int(2, 2, false), Some(0x1234));
        assert_eq!(int(4, 4, true), Some(-2));
        assert_eq!(int(4, 1, false), Some(0xfe));
        assert_eq!(int(6, 4, false), None, "past the bytes read");
        assert_eq!(Int { offset: 4, width: 4, signed: true }.get_u64(&bytes), None);
    }
}
