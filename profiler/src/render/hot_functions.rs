//! The functions with the most samples, as `profiler top` shows them: each function's self
//! weight (samples where it is the innermost frame) and total weight (samples where it is
//! anywhere in the stack, once however deep it recurses), the processes and threads it ran in
//! and its kind; and the samples' call paths, for the tree of a function's hottest paths.
//! Computed from a [`Recording`] (one window), added up window after window for "since the
//! start", and printed as a plain table when the output is not a terminal.
use std::{
    borrow::Cow,
    collections::{BTreeMap, HashMap},
    fmt::Write as _,
};

use crate::model::{Recording, Symbol, SymbolKind, Tgid, Tid, Weight};

/// The functions of some samples, with their weights.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct HotFunctions {
    /// The samples' weights, summed: what shares are of.
    pub total: u64,
    /// What weights count.
    pub weight: Weight,
    /// How long the samples were taken over.
    pub duration_ns: u64,
    pub functions: Vec<HotFunction>,
    /// Each function's index in `functions`, by its name and kind.
    index: HashMap<(String, Cow<'static, str>), usize>,
    /// The samples' stacks as functions (indexes into `functions`, the root first, a function
    /// inlined after the one it was inlined into), with their weights: what a function's call
    /// paths are read from. As many as the distinct stacks, not the samples.
    paths: HashMap<Box<[u32]>, u64>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct HotFunction {
    /// The function's name; a script's function with its file (`qualname (file.py)`).
    pub name: String,
    /// What kind of code: `native`, `kernel`, `Python`, `Java`... (see [`kind_label`]).
    pub kind: Cow<'static, str>,
    /// Weight of the samples where it is the innermost frame.
    pub self_weight: u64,
    /// Weight of the samples where it is anywhere in the stack.
    pub total_weight: u64,
    /// The processes it ran in, with their command names.
    pub processes: BTreeMap<Tgid, String>,
    /// Its weights in each thread it ran in, by process and thread: the per-thread view's rows.
    pub threads: BTreeMap<(Tgid, Tid), Weights>,
}

/// A function's self and total weights (in one thread).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Weights {
    pub self_weight: u64,
    pub total_weight: u64,
}

/// What a row of the table is: a function with its threads merged, or a function in one thread.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Split {
    #[default]
    Merged,
    ByThread,
}

/// A row of the table: a function, in all of its threads or in one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Row<'a> {
    pub function: &'a HotFunction,
    /// The process and thread the weights are of; `None`: all of them.
    pub thread: Option<(Tgid, Tid)>,
    pub weights: Weights,
}

/// How rows are ordered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum SortBy {
    #[default]
    SelfWeight,
    TotalWeight,
}

/// The call paths the tree of a function shows: the hottest, few enough to read at a glance.
pub(crate) const TREE_PATHS: usize = 5;

/// The callees the tree shows under the function, on each path: the hottest.
pub(crate) const TREE_CALLEES: usize = 3;

/// A line of the tree of a function's hottest call paths, top-down: its callers from the root,
/// the function, then its hottest callees.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TreeLine {
    /// How deep in the tree: 0 for a root.
    pub depth: usize,
    pub name: String,
    /// Weight of the paths shown that go through it.
    pub weight: u64,
    /// What it is to the function the tree is of.
    pub place: Place,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Place {
    Caller,
    /// The function the tree is of.
    Selected,
    Callee,
}

/// The kind of code a symbol names, as `top` shows it: a runtime's function's language, as the
/// runtime says (`Python`, `Java`, `Go`), else by its kind (`native`, an inlined function too;
/// `kernel`; `JIT`; `script`).
pub(crate) fn kind_label(symbol: &Symbol) -> Cow<'static, str> {
    if let Some(language) = &symbol.language {
        return language.clone();
    }
    Cow::Borrowed(match symbol.kind {
        SymbolKind::Function | SymbolKind::Inlined => "native",
        SymbolKind::Kernel => "kernel",
        SymbolKind::Jit => "JIT",
        SymbolKind::Script => "script",
    })
}

/// Where a sample without any frame goes.
const NO_STACK: (&str, &str) = ("[no stack]", "-");

impl HotFunctions {
    /// The functions of `recording`'s samples.
    pub(crate) fn of(recording: &Recording) -> Self {
        let mut table = Self {
            weight: recording.meta.weight,
            duration_ns: recording.meta.duration_ns,
            ..Self::default()
        };
        let mut by_stack: HashMap<u32, StackFunctions> = HashMap::new();
        for sample in &recording.samples {
            let stack = by_stack
                .entry(sample.stack)
                .or_insert_with(|| table.functions_of(recording, sample.stack))
                .clone();
            let comm = recording.comms.get(sample.comm as usize).map_or("?", String::as_str);
            let thread = (sample.pid, sample.tid);
            table.total += sample.weight;
            let innermost = &mut table.functions[stack.innermost];
            innermost.self_weight += sample.weight;
            innermost.threads.entry(thread).or_default().self_weight += sample.weight;
            for function in stack.all {
                let function = &mut table.functions[function];
                function.total_weight += sample.weight;
                function.threads.entry(thread).or_default().total_weight += sample.weight;
                function.processes.entry(sample.pid).or_insert_with(|| comm.to_owned());
            }
            *table.paths.entry(stack.path).or_default() += sample.weight;
        }
        table
    }

    /// The functions of `stack` (added when new).
    fn functions_of(&mut self, recording: &Recording, stack: u32) -> StackFunctions {
        let locations = recording.stacks.get(stack as usize).map_or(&[][..], Vec::as_slice);
        // Innermost first: a location's symbols are outermost first.
        let mut all: Vec<usize> = locations
            .iter()
            .filter_map(|&location| recording.locations.get(location as usize))
            .flat_map(|location| location.symbols.iter().rev())
            .map(|symbol| self.function(&function_name(symbol), kind_label(symbol)))
            .collect();
        if all.is_empty() {
            all.push(self.function(NO_STACK.0, Cow::Borrowed(NO_STACK.1)));
        }
        let innermost = all[0];
        let path = all.iter().rev().map(|&function| function as u32).collect();
        let mut seen = Vec::with_capacity(all.len());
        all.retain(|function| {
            let new = !seen.contains(function);
            seen.push(*function);
            new
        });
        StackFunctions { innermost, all, path }
    }

    /// The index of the function `name` of `kind`, added with no weight if new.
    fn function(&mut self, name: &str, kind: Cow<'static, str>) -> usize {
        if let Some(index) = self.find(name, &kind) {
            return index;
        }
        self.functions.push(HotFunction {
            name: name.to_owned(),
            kind: kind.clone(),
            self_weight: 0,
            total_weight: 0,
            processes: BTreeMap::new(),
            threads: BTreeMap::new(),
        });
        self.index.insert((name.to_owned(), kind), self.functions.len() - 1);
        self.functions.len() - 1
    }

    /// The index of the function `name` of `kind`, if it has a row.
    pub(crate) fn find(&self, name: &str, kind: &str) -> Option<usize> {
        self.index.get(&(name.to_owned(), Cow::Owned(kind.to_owned()))).copied()
    }

    /// Adds the functions, weights and paths of `other` (a later window) to these.
    pub(crate) fn add(&mut self, other: &Self) {
        self.total += other.total;
        self.weight = other.weight;
        self.duration_ns += other.duration_ns;
        // Each of `other`'s functions' index here.
        let mut here = Vec::with_capacity(other.functions.len());
        for function in &other.functions {
            let index = self.function(&function.name, function.kind.clone());
            here.push(index as u32);
            self.functions[index].add(function);
        }
        for (path, weight) in &other.paths {
            let path = path.iter().map(|&function| here[function as usize]).collect();
            *self.paths.entry(path).or_default() += weight;
        }
    }

    /// The rows, split by `split`, whose function's name or process's name contains `filter`
    /// (ignoring case; all when empty), heaviest first by `sort`, then by the other weight, then
    /// by name and thread.
    pub(crate) fn rows(&self, sort: SortBy, filter: &str, split: Split) -> Vec<Row<'_>> {
        let filter = filter.to_lowercase();
        let mut rows: Vec<Row<'_>> = self
            .functions
            .iter()
            .flat_map(|function| function.rows(split))
            .filter(|row| row.matches(&filter))
            .collect();
        let key = |row: &Row<'_>| match sort {
            SortBy::SelfWeight => (row.weights.self_weight, row.weights.total_weight),
            SortBy::TotalWeight => (row.weights.total_weight, row.weights.self_weight),
        };
        rows.sort_by(|a, b| {
            key(b)
                .cmp(&key(a))
                .then_with(|| a.function.name.cmp(&b.function.name))
                .then(a.thread.cmp(&b.thread))
        });
        rows
    }

    /// The tree of the hottest call paths through `function` (an index into `functions`): the
    /// [`TREE_PATHS`] heaviest chains of callers from a root down to it (to its outermost call
    /// when it recurses), sharing their common part, and under it its [`TREE_CALLEES`] heaviest
    /// callees on each; empty when no sample has it.
    pub(crate) fn call_tree(&self, function: usize) -> Vec<TreeLine> {
        let mut through: HashMap<&[u32], Through> = HashMap::new();
        for (path, &weight) in &self.paths {
            let Some(at) = path.iter().position(|&f| f as usize == function) else { continue };
            let callers = through.entry(&path[..=at]).or_default();
            callers.weight += weight;
            if let Some(&callee) = path.get(at + 1) {
                *callers.callees.entry(callee).or_default() += weight;
            }
        }
        let mut hottest: Vec<(&[u32], Through)> = through.into_iter().collect();
        hottest.sort_by(|a, b| b.1.weight.cmp(&a.1.weight).then_with(|| a.0.cmp(b.0)));
        let mut tree = Tree::default();
        for (callers, Through { weight, callees }) in hottest.into_iter().take(TREE_PATHS) {
            let mut node = None;
            for (depth, &caller) in callers.iter().enumerate() {
                let place = if depth + 1 == callers.len() { Place::Selected } else { Place::Caller };
                node = Some(tree.child(node, caller, place, weight));
            }
            let mut callees: Vec<(u32, u64)> = callees.into_iter().collect();
            callees.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
            for (callee, weight) in callees.into_iter().take(TREE_CALLEES) {
                tree.child(node, callee, Place::Callee, weight);
            }
        }
        tree.lines(&self.functions)
    }

    /// A line of a tree as the view shows it, cut to `width`: its share, then its name indented
    /// by its depth (`  60.1        a_inner`), the function the tree is of marked.
    pub(crate) fn tree_text(&self, line: &TreeLine, width: usize) -> String {
        let marker = match line.place {
            Place::Selected => "  ◀",
            Place::Caller | Place::Callee => "",
        };
        let indent = "  ".repeat(line.depth);
        clip(&format!("{:6.1}  {indent}{}{marker}", self.share(line.weight), line.name), width)
    }

    /// A weight's share of the total, in percent.
    pub(crate) fn share(&self, weight: u64) -> f64 {
        if self.total == 0 { 0.0 } else { weight as f64 * 100.0 / self.total as f64 }
    }

    /// What the total is: `1985 samples`, `3.2 s of thread time`.
    pub(crate) fn describe_total(&self) -> String {
        match self.weight {
            Weight::Samples => format!("{} samples", self.total),
            Weight::Bytes => format!("{} bytes", self.total),
            Weight::OffCpuNs | Weight::WallNs => format!("{:.1} s of thread time", self.total as f64 / 1e9),
        }
    }

    /// The plain table of the `limit` heaviest functions by `sort`, under a line that says what
    /// it covers: `profiler top: PID 1234 · last 1.0 s · 99 samples`.
    pub(crate) fn to_text(&self, title: &str, sort: SortBy, limit: usize) -> String {
        let mut text = format!(
            "profiler top: {title} · last {:.1} s · {}\n",
            self.duration_ns as f64 / 1e9,
            self.describe_total()
        );
        let _ = writeln!(text, "{:>6} {:>7}  {:<6}  {:<24}  FUNCTION", "SELF%", "TOTAL%", "KIND", "PROCESS");
        for row in self.rows(sort, "", Split::Merged).into_iter().take(limit) {
            let _ = writeln!(
                text,
                "{:>6.1} {:>7.1}  {:<6}  {:<24}  {}",
                self.share(row.weights.self_weight),
                self.share(row.weights.total_weight),
                row.function.kind,
                clip(&row.process_label(), 24),
                row.function.name
            );
        }
        text
    }
}

/// The functions of one stack, as indexes into [`HotFunctions::functions`].
#[derive(Clone)]
struct StackFunctions {
    innermost: usize,
    /// Each once.
    all: Vec<usize>,
    /// Root first, each call.
    path: Box<[u32]>,
}

/// The call paths that reach a function through the same callers: their weight, and that of
/// each function they call from it.
#[derive(Default)]
struct Through {
    weight: u64,
    callees: HashMap<u32, u64>,
}

/// A tree of call paths being built.
#[derive(Default)]
struct Tree {
    nodes: Vec<Node>,
    roots: Vec<usize>,
}

struct Node {
    /// An index into [`HotFunctions::functions`].
    function: u32,
    place: Place,
    weight: u64,
    children: Vec<usize>,
}

impl Tree {
    /// Adds `weight` to the child of `parent` (a root when `None`) that is `function` at
    /// `place`, made if new; returns it.
    fn child(&mut self, parent: Option<usize>, function: u32, place: Place, weight: u64) -> usize {
        let siblings = match parent {
            Some(parent) => &self.nodes[parent].children,
            None => &self.roots,
        };
        let found = siblings.iter().copied().find(|&node| {
            let node = &self.nodes[node];
            node.function == function && node.place == place
        });
        let node = found.unwrap_or_else(|| {
            self.nodes.push(Node { function, place, weight: 0, children: Vec::new() });
            let node = self.nodes.len() - 1;
            match parent {
                Some(parent) => self.nodes[parent].children.push(node),
                None => self.roots.push(node),
            }
            node
        });
        self.nodes[node].weight += weight;
        node
    }

    /// Its lines, depth first, the heaviest child first.
    fn lines(&self, functions: &[HotFunction]) -> Vec<TreeLine> {
        let mut lines = Vec::new();
        self.add_lines(&self.roots, 0, functions, &mut lines);
        lines
    }

    fn add_lines(&self, nodes: &[usize], depth: usize, functions: &[HotFunction], lines: &mut Vec<TreeLine>) {
        let mut nodes: Vec<&Node> = nodes.iter().map(|&node| &self.nodes[node]).collect();
        nodes.sort_by(|a, b| b.weight.cmp(&a.weight).then(a.function.cmp(&b.function)));
        for node in nodes {
            let name = functions.get(node.function as usize).map_or("?", |f| f.name.as_str());
            lines.push(TreeLine { depth, name: name.to_owned(), weight: node.weight, place: node.place });
            self.add_lines(&node.children, depth + 1, functions, lines);
        }
    }
}

impl HotFunction {
    /// Adds the weights, processes and threads of `other`, the same function.
    fn add(&mut self, other: &Self) {
        self.self_weight += other.self_weight;
        self.total_weight += other.total_weight;
        for (pid, comm) in &other.processes {
            self.processes.entry(*pid).or_insert_with(|| comm.clone());
        }
        for (thread, weights) in &other.threads {
            let mine = self.threads.entry(*thread).or_default();
            mine.self_weight += weights.self_weight;
            mine.total_weight += weights.total_weight;
        }
    }

    /// Its rows: itself, or one per thread it ran in.
    fn rows(&self, split: Split) -> Vec<Row<'_>> {
        match split {
            Split::Merged => {
                let weights = Weights { self_weight: self.self_weight, total_weight: self.total_weight };
                vec![Row { function: self, thread: None, weights }]
            }
            Split::ByThread => self
                .threads
                .iter()
                .map(|(&thread, &weights)| Row { function: self, thread: Some(thread), weights })
                .collect(),
        }
    }

    /// Its process (`app (1234)`), or how many (`[3 processes]`).
    pub(crate) fn process_label(&self) -> String {
        match self.processes.len() {
            1 => self.processes.iter().map(|(pid, comm)| format!("{comm} ({})", pid.0)).collect(),
            n => format!("[{n} processes]"),
        }
    }
}

impl Row<'_> {
    /// Its function's process or processes (see [`HotFunction::process_label`]), or its thread:
    /// `app (1234/1236)`.
    pub(crate) fn process_label(&self) -> String {
        match self.thread {
            None => self.function.process_label(),
            Some((pid, tid)) => {
                let comm = self.function.processes.get(&pid).map_or("?", String::as_str);
                format!("{comm} ({}/{})", pid.0, tid.0)
            }
        }
    }

    /// Whether its function's name or the name of a process of the row contains `filter`,
    /// already lowercase.
    fn matches(&self, filter: &str) -> bool {
        let in_row = |pid: &Tgid| self.thread.is_none_or(|(row_pid, _)| row_pid == *pid);
        filter.is_empty()
            || self.function.name.to_lowercase().contains(filter)
            || self
                .function
                .processes
                .iter()
                .any(|(pid, comm)| in_row(pid) && comm.to_lowercase().contains(filter))
    }
}

/// A function's name as `top` shows it: a script's function with its file but not its line, so
/// that a function is one row; others as named (names are made printable as they are read).
fn function_name(symbol: &Symbol) -> String {
    match (&symbol.kind, &symbol.source) {
        (SymbolKind::Script, Some(source)) => format!("{} ({})", symbol.name, source.file),
        _ => symbol.name.clone(),
    }
}

/// `text` cut to `width` characters, the last one an ellipsis when cut.
pub(crate) fn clip(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_owned();
    }
    let mut clipped: String = text.chars().take(width.saturating_sub(1)).collect();
    clipped.push('…');
    clipped
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Location, Meta, Sample, SourceLine, ThreadState, Tid};

    fn location(name: &str, kind: SymbolKind) -> Location {
        Location { module: None, address: 0, symbols: vec![Symbol::new(name, kind)] }
    }

    fn sample(pid: u32, comm: u32, stack: u32, weight: u64) -> Sample {
        Sample {
            time_ns: 0,
            pid: Tgid(pid),
            tid: Tid(pid),
            comm,
            stack,
            weight,
            state: ThreadState::OnCpu,
            labels: 0,
        }
    }

    /// main → run → {hot (6), warm (3), sys_read in the kernel under warm (1)}; `recurse` twice in
    /// one stack; a Python function at two lines; one sample without a stack; two processes.
    fn recording() -> Recording {
        let inlined = Location {
            module: None,
            address: 0,
            symbols: vec![
                Symbol::new("warm", SymbolKind::Function),
                Symbol::new("push", SymbolKind::Inlined),
            ],
        };
        let script = |line| Location {
            module: None,
            address: 0,
            symbols: vec![
                Symbol::new("handle", SymbolKind::Script)
                    .at(Some(SourceLine { file: "app.py".into(), line, column: 0 }))
                    .in_language("Python"),
            ],
        };
        Recording {
            meta: Meta { duration_ns: 2_000_000_000, ..Meta::default() },
            locations: vec![
                location("main", SymbolKind::Function),    // 0
                location("run", SymbolKind::Function),     // 1
                location("hot", SymbolKind::Function),     // 2
                inlined,                                   // 3: warm with push inlined
                location("sys_read", SymbolKind::Kernel),  // 4
                location("recurse", SymbolKind::Function), // 5
                script(10),                                // 6
                script(20),                                // 7
            ],
            stacks: vec![
                vec![2, 1, 0],
                vec![3, 1, 0],
                vec![4, 3, 1, 0],
                vec![5, 5, 1, 0],
                vec![6, 1, 0],
                vec![7, 1, 0],
                vec![],
            ],
            comms: vec!["app".into(), "other".into()],
            samples: vec![
                sample(10, 0, 0, 5),
                sample(20, 1, 0, 1),
                sample(10, 0, 1, 3),
                sample(10, 0, 2, 1),
                sample(10, 0, 3, 2),
                sample(10, 0, 4, 1),
                sample(10, 0, 5, 1),
                sample(10, 0, 6, 1),
            ],
            ..Recording::default()
        }
    }

    fn row<'a>(table: &'a HotFunctions, name: &str) -> &'a HotFunction {
        table.functions.iter().find(|f| f.name == name).unwrap_or_else(|| panic!("no {name}"))
    }

    #[test]
    fn self_and_total_weights_by_function() {
        let table = HotFunctions::of(&recording());
        assert_eq!(table.total, 15);
        let weights = |name| (row(&table, name).self_weight, row(&table, name).total_weight);
        assert_eq!(weights("hot"), (6, 6));
        // The inlined function is the innermost frame; the function it was inlined into is in
        // the stack.
        assert_eq!(weights("push"), (3, 4));
        assert_eq!(weights("warm"), (0, 4));
        assert_eq!(weights("sys_read"), (1, 1));
        // Counted once per sample however deep it recurses.
        assert_eq!(weights("recurse"), (2, 2));
        // One row per script function, whatever its line.
        assert_eq!(weights("handle (app.py)"), (2, 2));
        assert_eq!(weights("run"), (0, 14));
        assert_eq!(weights("main"), (0, 14));
        assert_eq!(weights("[no stack]"), (1, 1));
        assert_eq!(row(&table, "sys_read").kind, "kernel");
        assert_eq!(row(&table, "push").kind, "native");
        assert_eq!(row(&table, "handle (app.py)").kind, "Python");
        assert_eq!(table.share(6), 40.0);
    }

    #[test]
    fn processes_are_named_or_counted() {
        let table = HotFunctions::of(&recording());
        assert_eq!(row(&table, "hot").process_label(), "[2 processes]");
        assert_eq!(row(&table, "sys_read").process_label(), "app (10)");
    }

    fn names(rows: Vec<Row<'_>>) -> Vec<String> {
        rows.iter().map(|row| row.function.name.clone()).collect()
    }

    #[test]
    fn rows_sort_and_filter() {
        let table = HotFunctions::of(&recording());
        let by_self = names(table.rows(SortBy::SelfWeight, "", Split::Merged));
        assert_eq!(by_self[..4], ["hot", "push", "handle (app.py)", "recurse"]);
        let by_total = names(table.rows(SortBy::TotalWeight, "", Split::Merged));
        assert_eq!(by_total[..3], ["main", "run", "hot"]);
        assert_eq!(names(table.rows(SortBy::SelfWeight, "PUS", Split::Merged)), ["push"]);
        // A process's name matches every function it ran.
        assert_eq!(names(table.rows(SortBy::SelfWeight, "other", Split::Merged)), ["hot", "main", "run"]);
    }

    /// The recording, with hot's work in a second thread of `app` too (4 samples).
    fn two_threads() -> Recording {
        let mut recording = recording();
        recording.samples.push(Sample { tid: Tid(11), ..sample(10, 0, 0, 4) });
        recording
    }

    #[test]
    fn rows_by_thread_split_what_merged_rows_add_up() {
        let table = HotFunctions::of(&two_threads());
        let merged = table.rows(SortBy::SelfWeight, "hot", Split::Merged);
        assert_eq!(merged.len(), 1, "one row however many threads");
        assert_eq!((merged[0].weights.self_weight, merged[0].process_label()), (10, "[2 processes]".into()));
        let rows: Vec<(String, u64, u64)> = table
            .rows(SortBy::SelfWeight, "hot", Split::ByThread)
            .iter()
            .map(|row| (row.process_label(), row.weights.self_weight, row.weights.total_weight))
            .collect();
        assert_eq!(
            rows,
            [("app (10/10)".into(), 5, 5), ("app (10/11)".into(), 4, 4), ("other (20/20)".into(), 1, 1)]
        );
        // A process's name matches the rows of its threads only.
        let other = table.rows(SortBy::SelfWeight, "other", Split::ByThread);
        assert_eq!(names(other.clone()), ["hot", "main", "run"]);
        assert!(other.iter().all(|row| row.thread == Some((Tgid(20), Tid(20)))));
        let threads = |table: &HotFunctions| table.rows(SortBy::SelfWeight, "", Split::ByThread).len();
        let mut since_start = HotFunctions::default();
        since_start.add(&table);
        since_start.add(&table);
        assert_eq!(threads(&since_start), threads(&table), "the same threads");
        let run = &since_start.functions[since_start.find("run", "native").unwrap()];
        assert_eq!(run.threads[&(Tgid(10), Tid(11))], Weights { self_weight: 0, total_weight: 8 });
    }

    fn tree(table: &HotFunctions, name: &str) -> Vec<(usize, String, u64, Place)> {
        let function = table.find(name, "native").unwrap_or_else(|| panic!("no {name}"));
        table.call_tree(function).into_iter().map(|l| (l.depth, l.name, l.weight, l.place)).collect()
    }

    fn line(depth: usize, name: &str, weight: u64, place: Place) -> (usize, String, u64, Place) {
        (depth, name.to_owned(), weight, place)
    }

    #[test]
    fn call_tree_from_the_root_to_the_callees() {
        let table = HotFunctions::of(&recording());
        use Place::*;
        // The hottest callees only, the heaviest first (recurse before handle: a tie, the first
        // seen first).
        assert_eq!(
            tree(&table, "run"),
            [
                line(0, "main", 14, Caller),
                line(1, "run", 14, Selected),
                line(2, "hot", 6, Callee),
                line(2, "warm", 4, Callee),
                line(2, "recurse", 2, Callee),
            ]
        );
        // Through the function an inlined one was inlined into, down to the kernel.
        assert_eq!(
            tree(&table, "push"),
            [
                line(0, "main", 4, Caller),
                line(1, "run", 4, Caller),
                line(2, "warm", 4, Caller),
                line(3, "push", 4, Selected),
                line(4, "sys_read", 1, Callee),
            ]
        );
        // Down to its outermost call when it recurses.
        assert_eq!(
            tree(&table, "recurse")[2..],
            [line(2, "recurse", 2, Selected), line(3, "recurse", 2, Callee)]
        );
        let text = table.tree_text(&table.call_tree(table.find("run", "native").unwrap())[1], 80);
        assert_eq!(text, "  93.3    run  ◀");
        assert_eq!(
            table.tree_text(&table.call_tree(table.find("run", "native").unwrap())[1], 10),
            "  93.3   …"
        );
    }

    /// `leaf` called by `caller0`... `caller6` under main, weighing 7 down to 1, and by `other`
    /// as a root of its own (weighing 1).
    fn many_callers() -> Recording {
        let mut locations =
            vec![location("leaf", SymbolKind::Function), location("main", SymbolKind::Function)];
        let mut stacks = Vec::new();
        let mut samples = Vec::new();
        for caller in 0..7u32 {
            locations.push(location(&format!("caller{caller}"), SymbolKind::Function));
            stacks.push(vec![0, caller + 2, 1]);
            samples.push(sample(1, 0, caller, 7 - u64::from(caller)));
        }
        locations.push(location("other", SymbolKind::Function));
        stacks.push(vec![0, locations.len() as u32 - 1]);
        samples.push(sample(1, 0, 7, 1));
        Recording { locations, stacks, comms: vec!["app".into()], samples, ..Recording::default() }
    }

    #[test]
    fn call_tree_shows_the_hottest_paths_sharing_their_callers() {
        use Place::*;
        let table = HotFunctions::of(&many_callers());
        let lines = tree(&table, "leaf");
        assert_eq!(lines.len(), 1 + 2 * TREE_PATHS, "{lines:?}");
        assert_eq!(lines[0], line(0, "main", 7 + 6 + 5 + 4 + 3, Caller), "the paths shown only");
        assert_eq!(lines[1..3], [line(1, "caller0", 7, Caller), line(2, "leaf", 7, Selected)]);
        assert_eq!(lines[9..], [line(1, "caller4", 3, Caller), line(2, "leaf", 3, Selected)]);
        assert!(!lines.iter().any(|(_, name, _, _)| name == "other" || name == "caller5"));
    }

    #[test]
    fn call_paths_add_up_since_the_start() {
        let window = HotFunctions::of(&recording());
        let mut since_start = HotFunctions::default();
        // Another window first: the functions are numbered otherwise since the start.
        since_start.add(&HotFunctions::of(&many_callers()));
        since_start.add(&window);
        since_start.add(&window);
        let doubled: Vec<_> = tree(&window, "push")
            .into_iter()
            .map(|(depth, name, weight, place)| (depth, name, 2 * weight, place))
            .collect();
        assert_eq!(tree(&since_start, "push"), doubled);
        assert_eq!(tree(&since_start, "main")[0], line(0, "main", 28 + 2 * 14, Place::Selected));
    }

    #[test]
    fn windows_add_up() {
        let window = HotFunctions::of(&recording());
        let mut since_start = HotFunctions::default();
        since_start.add(&window);
        since_start.add(&window);
        assert_eq!(since_start.total, 30);
        assert_eq!(since_start.duration_ns, 4_000_000_000);
        assert_eq!((row(&since_start, "hot").self_weight, row(&since_start, "run").total_weight), (12, 28));
        assert_eq!(since_start.functions.len(), window.functions.len());
    }

    #[test]
    fn plain_table() {
        let text = HotFunctions::of(&recording()).to_text("PID 10", SortBy::SelfWeight, 2);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "profiler top: PID 10 · last 2.0 s · 15 samples");
        assert_eq!(lines[1], " SELF%  TOTAL%  KIND    PROCESS                   FUNCTION");
        assert_eq!(lines[2], "  40.0    40.0  native  [2 processes]             hot");
        assert_eq!(lines[3], "  20.0    26.7  native  app (10)                  push");
        assert_eq!(lines.len(), 4);
    }

    #[test]
    fn kinds_by_language_then_by_kind() {
        let at = |name: &str, kind, file: &str| {
            Symbol::new(name, kind).at(Some(SourceLine { file: file.into(), line: 1, column: 0 }))
        };
        assert_eq!(
            kind_label(&at("Shares.alpha", SymbolKind::Jit, "Shares.java").in_language("Java")),
            "Java"
        );
        assert_eq!(kind_label(&at("main.work", SymbolKind::Inlined, "main.go").in_language("Go")), "Go");
        assert_eq!(kind_label(&at("work", SymbolKind::Function, "/src/work.c")), "native");
        assert_eq!(
            kind_label(&at("handler", SymbolKind::Script, "server.js")),
            "script",
            "the runtime says, not the file"
        );
        assert_eq!(kind_label(&Symbol::new("schedule", SymbolKind::Kernel)), "kernel");
        assert_eq!(kind_label(&Symbol::new("LazyCompile:~f", SymbolKind::Jit)), "JIT");
    }

    #[test]
    fn clipping() {
        assert_eq!(clip("abcdef", 4), "abc…");
        assert_eq!(clip("abc", 4), "abc");
    }
}
