//! Names of code, as the model keeps them: a name and what kind of code it names.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SymbolKind {
    /// A user function.
    Function,
    /// A user function inlined into the one before it.
    Inlined,
    /// A kernel function.
    Kernel,
    /// JIT-compiled code, named by the process's perf map.
    Jit,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Symbol {
    pub name: String,
    pub kind: SymbolKind,
}

impl Symbol {
    pub fn new(name: impl Into<String>, kind: SymbolKind) -> Self {
        Self { name: name.into(), kind }
    }

    /// The name as flame graphs and summaries show it: without the folded format's separators,
    /// and with the suffix of its kind (`_[k]` kernel, `_[i]` inlined, `_[j]` JIT), the
    /// convention of perf and FlameGraph that inferno's palettes colour by.
    pub fn display_name(&self) -> String {
        let suffix = match self.kind {
            SymbolKind::Function => "",
            SymbolKind::Inlined => "_[i]",
            SymbolKind::Kernel => "_[k]",
            SymbolKind::Jit => "_[j]",
        };
        format!("{}{suffix}", without_separators(&self.name))
    }
}

/// A name with the separators of the folded format (`;` between frames, one stack per line)
/// replaced, so that it stays one frame.
pub fn without_separators(name: &str) -> String {
    name.replace(';', ":").replace(['\n', '\r'], " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_carry_their_kind() {
        let name = |kind| Symbol::new("a;b\nc", kind).display_name();
        assert_eq!(name(SymbolKind::Function), "a:b c");
        assert_eq!(name(SymbolKind::Inlined), "a:b c_[i]");
        assert_eq!(name(SymbolKind::Kernel), "a:b c_[k]");
        assert_eq!(name(SymbolKind::Jit), "a:b c_[j]");
    }
}
