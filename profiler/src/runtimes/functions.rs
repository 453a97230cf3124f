//! The functions runtimes' frames name (Python functions, Java methods), each once, by index:
//! a [`Frame::Runtime`](crate::frame::Frame::Runtime) names one of them and a line.
use indexmap::IndexSet;
use rustc_hash::FxBuildHasher;

use crate::model::{SourceLine, Symbol, SymbolKind};

/// (name, source file, kind), each once, by index.
#[derive(Default)]
pub struct Functions {
    set: IndexSet<(String, String, Kind), FxBuildHasher>,
}

/// What a runtime's function is, as its frames are shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    Python,
    /// A Java method run by the interpreter (or a native method).
    JavaInterpreted,
    /// A Java method compiled by the JIT.
    JavaCompiled,
    /// A Java method the JIT inlined into the one below it.
    JavaInlined,
    /// Code of the JVM's own in its code cache (stubs, adapters).
    JavaStub,
}

impl Kind {
    fn symbol_kind(self) -> SymbolKind {
        match self {
            Self::Python => SymbolKind::Python,
            Self::JavaInterpreted => SymbolKind::Function,
            Self::JavaCompiled | Self::JavaStub => SymbolKind::Jit,
            Self::JavaInlined => SymbolKind::Inlined,
        }
    }
}

impl Functions {
    pub fn intern(&mut self, name: &str, file: &str, kind: Kind) -> u32 {
        let key = (name.to_owned(), file.to_owned(), kind);
        match self.set.get_index_of(&key) {
            Some(index) => index as u32,
            None => self.set.insert_full(key).0 as u32,
        }
    }

    /// The name of a [`Frame::Runtime`](crate::frame::Frame::Runtime).
    pub fn symbol(&self, function: u32, line: u32) -> Symbol {
        let Some((name, file, kind)) = self.set.get_index(function as usize) else {
            return Symbol::new("[unknown runtime code]", SymbolKind::Function);
        };
        let source = (!file.is_empty()).then(|| SourceLine { file: file.clone(), line });
        Symbol::new(name.as_str(), kind.symbol_kind()).at(source)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_function_once_and_named_with_its_line() {
        let mut functions = Functions::default();
        let a = functions.intern("Shares.alpha", "Shares.java", Kind::JavaCompiled);
        let b = functions.intern("Shares.alpha", "Shares.java", Kind::JavaInlined);
        assert_ne!(a, b, "another kind is another function");
        assert_eq!(functions.intern("Shares.alpha", "Shares.java", Kind::JavaCompiled), a);
        let symbol = functions.symbol(b, 15);
        assert_eq!((symbol.name.as_str(), symbol.kind), ("Shares.alpha", SymbolKind::Inlined));
        assert_eq!(symbol.source, Some(SourceLine { file: "Shares.java".into(), line: 15 }));
        assert_eq!(functions.symbol(99, 1).name, "[unknown runtime code]");
    }
}
