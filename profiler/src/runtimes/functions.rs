//! The functions runtimes' frames name (Python functions, Java methods), each once, by id: a
//! [`Frame::Runtime`](crate::frame::Frame::Runtime) names one of them and a line.
//!
//! Names are the targets' (a process may make up new ones all day), so the table is charged to
//! the budget of what targets describe about themselves ([`DESCRIBED`]) and pruned: a function
//! goes once no runtime's cache holds it ([`FunctionRef`]) and no frame has named it since
//! frames were last handed to naming. An id is never given to another function: a frame named
//! already keeps its name.
use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::{
    model::{SourceLine, Symbol, SymbolKind},
    untrusted::{Budget, Charge, DESCRIBED},
};

/// A function a runtime's frame names.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(crate) struct Function {
    pub name: String,
    /// Its source file; empty when not known.
    pub file: String,
    /// The column its definition starts at on its first line (1-based; 0 when not known: only
    /// JavaScript's functions say it, and their frames' line is that first line).
    pub column: u32,
    /// How its frames are shown: run by an interpreter (`Script`), compiled (`Function`, `Jit`),
    /// inlined into the function below it.
    pub kind: SymbolKind,
    /// Its language, as its runtime names it (`Python`); none for the runtime's own code.
    pub language: Option<&'static str>,
}

impl Function {
    /// About the bytes it holds.
    fn size(&self) -> usize {
        std::mem::size_of::<Self>() + self.name.len() + self.file.len()
    }
}

/// A function of the table, held: the table keeps it while this lives.
#[derive(Clone, Debug)]
pub struct FunctionRef {
    pub id: u32,
    _held: Arc<Function>,
}

impl FunctionRef {
    /// Whether it is a function of its own, not the placeholder of one the budget had no room
    /// for (which is never remembered: its name may fit at the next sample).
    pub fn is_kept(&self) -> bool {
        self.id != UNKEPT
    }
}

/// The functions, by id and by what they are.
pub struct Functions {
    budget: &'static Budget,
    by_id: FxHashMap<u32, Entry>,
    by_function: FxHashMap<Arc<Function>, u32>,
    next_id: u32,
    /// Functions not kept for want of room, named by [`UNKEPT`]'s placeholder instead.
    unkept: u64,
}

struct Entry {
    function: Arc<Function>,
    /// The epoch of [`DESCRIBED`] it was last interned in.
    used: u64,
    _charge: Option<Charge>,
}

/// The id of the function frames get when the budget has no room for theirs.
const UNKEPT: u32 = 0;

impl Default for Functions {
    /// Functions charged to the budget of what targets describe.
    fn default() -> Self {
        Self::new(&DESCRIBED)
    }
}

impl Functions {
    /// Functions charged to `budget`.
    pub fn new(budget: &'static Budget) -> Self {
        let unkept = Arc::new(Function {
            name: "[not named: the memory for what targets describe was spent]".into(),
            file: String::new(),
            column: 0,
            kind: SymbolKind::Function,
            language: None,
        });
        let entry = Entry { function: unkept.clone(), used: u64::MAX, _charge: None };
        Self {
            budget,
            by_id: FxHashMap::from_iter([(UNKEPT, entry)]),
            by_function: FxHashMap::from_iter([(unkept, UNKEPT)]),
            next_id: UNKEPT + 1,
            unkept: 0,
        }
    }

    /// The function (name, file, column, kind, language), held; the placeholder of [`UNKEPT`]
    /// when the budget has no room for a new one.
    pub fn intern(
        &mut self,
        name: &str,
        file: &str,
        column: u32,
        kind: SymbolKind,
        language: Option<&'static str>,
    ) -> FunctionRef {
        let function = Function { name: name.to_owned(), file: file.to_owned(), column, kind, language };
        let epoch = self.budget.epoch();
        if let Some(&id) = self.by_function.get(&function) {
            let entry = self.by_id.get_mut(&id).expect("both maps hold every function");
            entry.used = entry.used.max(epoch);
            return FunctionRef { id, _held: entry.function.clone() };
        }
        // An id is never given twice: past the last one, nothing new is named.
        let (Some(charge), Some(next_id)) =
            (self.budget.charge(2 * function.size() as u64), self.next_id.checked_add(1))
        else {
            self.unkept += 1;
            return self.held(UNKEPT);
        };
        let id = std::mem::replace(&mut self.next_id, next_id);
        let function = Arc::new(function);
        self.by_function.insert(function.clone(), id);
        self.by_id.insert(id, Entry { function, used: epoch, _charge: Some(charge) });
        self.held(id)
    }

    fn held(&self, id: u32) -> FunctionRef {
        FunctionRef { id, _held: self.by_id[&id].function.clone() }
    }

    /// The name of a [`Frame::Runtime`](crate::frame::Frame::Runtime).
    pub fn symbol(&self, function: u32, line: u32) -> Symbol {
        let Some(Entry { function, .. }) = self.by_id.get(&function) else {
            return Symbol::new("[unknown runtime code]", SymbolKind::Function);
        };
        let source = (!function.file.is_empty()).then(|| SourceLine {
            file: function.file.clone(),
            line,
            column: function.column,
        });
        let symbol = Symbol::new(function.name.as_str(), function.kind).at(source);
        match function.language {
            Some(language) => symbol.in_language(language),
            None => symbol,
        }
    }

    /// Lets go of the functions no cache holds and no frame named in this epoch: called once
    /// the frames walked so far are handed to naming, just before a new epoch starts.
    pub fn prune(&mut self) {
        let epoch = self.budget.epoch();
        let Self { by_id, by_function, .. } = self;
        by_id.retain(|_, entry| {
            // The table's two references alone.
            let held = Arc::strong_count(&entry.function) > 2 || entry.used >= epoch;
            if !held {
                by_function.remove(&entry.function);
            }
            held
        });
    }

    /// Functions not kept for want of room so far.
    pub fn unkept(&self) -> u64 {
        self.unkept
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_function_once_and_named_with_its_line() {
        let mut functions = Functions::default();
        let a = functions.intern("Shares.alpha", "Shares.java", 0, SymbolKind::Jit, Some("Java"));
        let b = functions.intern("Shares.alpha", "Shares.java", 0, SymbolKind::Inlined, Some("Java"));
        assert_ne!(a.id, b.id, "another kind is another function");
        assert_eq!(
            functions.intern("Shares.alpha", "Shares.java", 0, SymbolKind::Jit, Some("Java")).id,
            a.id
        );
        let symbol = functions.symbol(b.id, 15);
        assert_eq!((symbol.name.as_str(), symbol.kind), ("Shares.alpha", SymbolKind::Inlined));
        assert_eq!(symbol.source, Some(SourceLine { file: "Shares.java".into(), line: 15, column: 0 }));
        assert_eq!(functions.symbol(99, 1).name, "[unknown runtime code]");
    }

    #[test]
    fn functions_go_once_nothing_holds_them_and_their_ids_stay_theirs() {
        let budget: &'static Budget = Box::leak(Box::new(Budget::new(1 << 20)));
        let mut functions = Functions::new(budget);
        let kept = functions.intern("kept", "a.py", 0, SymbolKind::Script, Some("Python"));
        let dropped = functions.intern("dropped", "a.py", 0, SymbolKind::Script, Some("Python")).id;
        functions.prune();
        assert_eq!(functions.by_id.len(), 3, "interned in this epoch: both stay (and the placeholder)");
        budget.next_epoch();
        functions.prune();
        assert_eq!(functions.symbol(kept.id, 1).name, "kept", "held by a cache");
        assert_eq!(functions.symbol(dropped, 1).name, "[unknown runtime code]", "held by nothing: gone");
        let again = functions.intern("dropped", "a.py", 0, SymbolKind::Script, Some("Python"));
        assert_ne!(again.id, dropped, "a new id: frames of the old one were named already");
    }

    #[test]
    fn no_room_names_frames_by_a_placeholder() {
        let budget: &'static Budget = Box::leak(Box::new(Budget::new(200)));
        let mut functions = Functions::new(budget);
        let long = "x".repeat(200);
        let unkept = functions.intern(&long, "", 0, SymbolKind::Script, Some("Python"));
        assert_eq!(unkept.id, UNKEPT);
        assert!(functions.symbol(unkept.id, 0).name.starts_with("[not named"));
        assert_eq!(functions.unkept(), 1);
    }
}
