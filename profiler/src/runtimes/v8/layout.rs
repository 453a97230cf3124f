//! The layout of V8's frames and objects the walk reads, from the `v8dbg_*` metadata: every
//! offset and type tag by name, checked for sense (the file is the target's: a value out of
//! bounds refuses the whole layout rather than misnaming frames). Where a name changed between
//! versions, each spelling is tried in turn.
use std::collections::HashMap;

use anyhow::{Result, bail};

use super::image::Version;

/// Largest object field offset taken.
const MAX_FIELD: i64 = 256;
/// Largest frame slot offset from the frame pointer taken, either way.
const MAX_SLOT: i64 = 128;

/// Offsets are in bytes from an object's start (its tagged pointer less the tag), frame slots
/// in bytes from the frame pointer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    pub version: Version,
    /// Frame slots: the context (JavaScript frames) or the frame type marker (others), and the
    /// `JSFunction`.
    pub fp_context_or_marker: i64,
    pub fp_function: i64,
    pub heap_object_map: u64,
    pub map_instance_type: u64,
    pub function_shared: u64,
    pub shared_name_or_scope_info: u64,
    pub shared_script: u64,
    pub script_name: u64,
    pub script_source: u64,
    pub string_length: u64,
    pub seq_one_byte_chars: u64,
    pub seq_two_byte_chars: u64,
    pub cons_first: u64,
    pub cons_second: u64,
    pub thin_actual: u64,
    pub types: Types,
    pub strings: StringTags,
    pub scope_info: ScopeInfoSlots,
}

/// Instance types of the objects read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Types {
    pub shared_function_info: u16,
    pub script: u16,
    pub scope_info: u16,
    /// Types below this are strings.
    pub first_nonstring: u16,
}

/// How a string's instance type says what it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StringTags {
    pub representation_mask: u16,
    pub seq: u16,
    pub cons: u16,
    pub thin: u16,
    pub encoding_mask: u16,
    pub one_byte: u16,
}

/// Where a `ScopeInfo`'s slots are: its first (after the map), the count of context locals, the
/// first of the variable part; and whether the function's start and end positions are at fixed
/// slots (V8 12.8.44 and later) rather than after its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScopeInfoSlots {
    pub context_locals: usize,
    pub first_vars: usize,
    pub fixed_positions: bool,
}

/// V8 12.8.44 moved a function's positions to fixed slots of its `ScopeInfo`.
const FIXED_POSITIONS: Version = Version(12, 8, 44, 0);

impl Layout {
    pub fn new(symbols: &HashMap<String, i64>, version: Version) -> Result<Self> {
        let table = Table(symbols);
        let tagged = table.any(&["TaggedSize"])?;
        if tagged != 8 {
            bail!("its tagged values are {tagged} bytes (pointer compression), which is not read");
        }
        if table.any(&["HeapObjectTag"])? != 1 || table.any(&["SmiTagMask"])? != 1 {
            bail!("its tags are not V8's usual ones");
        }
        let field = |names: &[&str]| -> Result<u64> {
            let value = table.any(names)?;
            if !(0..=MAX_FIELD).contains(&value) {
                bail!("{} is {value}, out of bounds", names[0]);
            }
            Ok(value as u64)
        };
        let slot = |names: &[&str]| -> Result<i64> {
            let value = table.any(names)?;
            if value == 0 || value.abs() > MAX_SLOT || value % 8 != 0 {
                bail!("{} is {value}, not a frame slot", names[0]);
            }
            Ok(value)
        };
        let kind = |names: &[&str]| -> Result<u16> {
            u16::try_from(table.any(names)?).map_err(|_| anyhow::anyhow!("{} is not a type", names[0]))
        };
        let index = |names: &[&str]| -> Result<usize> {
            let value = table.any(names)?;
            if !(0..16).contains(&value) {
                bail!("{} is {value}, out of bounds", names[0]);
            }
            Ok(value as usize)
        };
        let layout = Self {
            version,
            fp_context_or_marker: slot(&["off_fp_context_or_frame_type", "off_fp_context"])?,
            fp_function: slot(&["off_fp_function"])?,
            heap_object_map: field(&["class_HeapObject__map__Map", "class_HeapObject__map__Tagged_Map_"])?,
            map_instance_type: field(&["class_Map__instance_type__uint16_t"])?,
            function_shared: field(&[
                "class_JSFunction__shared__SharedFunctionInfo",
                "class_JSFunction__shared__Tagged_SharedFunctionInfo_",
            ])?,
            shared_name_or_scope_info: field(&[
                "class_SharedFunctionInfo__name_or_scope_info__Object",
                "class_SharedFunctionInfo__name_or_scope_info__Tagged_Object_",
                "class_SharedFunctionInfo__name_or_scope_info__Tagged_NameOrScopeInfoT_",
            ])?,
            shared_script: field(&[
                "class_SharedFunctionInfo__script_or_debug_info__HeapObject",
                "class_SharedFunctionInfo__script_or_debug_info__Object",
                "class_SharedFunctionInfo__script__Object",
                "class_SharedFunctionInfo__script__Tagged_HeapObject_",
                "class_SharedFunctionInfo__script__Tagged_Object_",
            ])?,
            script_name: field(&["class_Script__name__Object", "class_Script__name__Tagged_Object_"])?,
            script_source: field(&["class_Script__source__Object", "class_Script__source__Tagged_Object_"])?,
            string_length: field(&["class_String__length__int32_t", "class_String__length__uint32_t"])?,
            seq_one_byte_chars: field(&["class_SeqOneByteString__chars__char"])?,
            seq_two_byte_chars: field(&["class_SeqTwoByteString__chars__char"])?,
            cons_first: field(&[
                "class_ConsString__first__String",
                "class_ConsString__first__Tagged_String_",
            ])?,
            cons_second: field(&[
                "class_ConsString__second__String",
                "class_ConsString__second__Tagged_String_",
            ])?,
            thin_actual: field(&[
                "class_ThinString__actual__String",
                "class_ThinString__actual__Tagged_String_",
            ])?,
            types: Types {
                shared_function_info: kind(&["type_SharedFunctionInfo__SHARED_FUNCTION_INFO_TYPE"])?,
                script: kind(&["type_Script__SCRIPT_TYPE"])?,
                scope_info: kind(&["type_ScopeInfo__SCOPE_INFO_TYPE"])?,
                first_nonstring: kind(&["FirstNonstringType"])?,
            },
            strings: StringTags {
                representation_mask: kind(&["StringRepresentationMask"])?,
                seq: kind(&["SeqStringTag"])?,
                cons: kind(&["ConsStringTag"])?,
                thin: kind(&["ThinStringTag"])?,
                encoding_mask: kind(&["StringEncodingMask"])?,
                one_byte: kind(&["OneByteStringTag"])?,
            },
            scope_info: ScopeInfoSlots {
                context_locals: index(&["scopeinfo_idx_ncontextlocals"])?,
                first_vars: index(&["scopeinfo_idx_first_vars"])?,
                fixed_positions: version >= FIXED_POSITIONS,
            },
        };
        if layout.fp_context_or_marker == layout.fp_function {
            bail!("its frame's context and function share a slot");
        }
        let tags = layout.strings;
        if [tags.seq, tags.cons, tags.thin].iter().any(|tag| tag & !tags.representation_mask != 0)
            || tags.one_byte & !tags.encoding_mask != 0
        {
            bail!("its string tags do not fit their masks");
        }
        Ok(layout)
    }
}

/// The metadata by name (without `v8dbg_`).
struct Table<'a>(&'a HashMap<String, i64>);

impl Table<'_> {
    /// The value of the first of `names` present.
    fn any(&self, names: &[&str]) -> Result<i64> {
        match names.iter().find_map(|name| self.0.get(*name)) {
            Some(&value) => Ok(value),
            None => bail!("it exports no v8dbg_{}", names[0]),
        }
    }
}
