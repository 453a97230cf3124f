//! Layouts of kernel structures, read from the kernel's BTF: the offsets the eBPF programs need
//! to read a field, passed to them as load-time constants (a hand-made CO-RE relocation, which
//! aya-ebpf cannot emit from Rust).
use std::collections::HashMap;

use anyhow::{Context as _, Result, anyhow};
use btf_rs::{Backend, Btf, Struct, Type};

const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

/// The running kernel's BTF, mapped and read lazily (parsing all of it up front costs ~130 ms),
/// and the structs looked up in it: each lookup by name scans every type.
pub(crate) struct KernelBtf {
    btf: Btf,
    structs: HashMap<String, Vec<Struct>>,
}

impl KernelBtf {
    pub(crate) fn open() -> Result<Self> {
        let btf = Btf::from_file_with_backend(VMLINUX_BTF, Backend::Mmap)
            .with_context(|| format!("cannot read {VMLINUX_BTF}"))?;
        Ok(Self { btf, structs: HashMap::new() })
    }

    /// Byte offset of `field` in `struct name`, looking into anonymous structs and unions.
    pub(crate) fn field_offset(&mut self, name: &str, field: &str) -> Result<u32> {
        let Self { btf, structs } = self;
        let candidates = structs.entry(name.to_owned()).or_insert_with(|| {
            let types = btf.resolve_types_by_name(name).unwrap_or_default();
            types.into_iter().filter_map(|t| if let Type::Struct(s) = t { Some(s) } else { None }).collect()
        });
        let bits = candidates
            .iter()
            .find_map(|s| find(btf, s, field))
            .ok_or_else(|| anyhow!("the kernel's BTF has no struct {name} with a field {field}"))?;
        Ok(bits / 8)
    }
}

/// Bit offset of `field` in `s`.
fn find(btf: &Btf, s: &Struct, field: &str) -> Option<u32> {
    s.members.iter().find_map(|member| {
        let name = btf.resolve_name(member).ok()?;
        if name == field {
            return Some(member.bit_offset());
        }
        if !name.is_empty() {
            return None;
        }
        match btf.resolve_chained_type(member).ok()? {
            Type::Struct(inner) | Type::Union(inner) => Some(member.bit_offset() + find(btf, &inner, field)?),
            _ => None,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_struct_fields() {
        // pid and tgid are consecutive pid_t fields of task_struct in every kernel since 2.6.
        let mut btf = KernelBtf::open().unwrap();
        let pid = btf.field_offset("task_struct", "pid").unwrap();
        let tgid = btf.field_offset("task_struct", "tgid").unwrap();
        assert_eq!(tgid, pid + 4);
        assert!(btf.field_offset("task_struct", "no_such_field").is_err());
        assert!(btf.field_offset("no_such_struct", "pid").is_err());
    }
}
