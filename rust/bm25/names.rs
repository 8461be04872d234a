//! Exact tool-name lookups: by name, `server/name` id or exposed name, and names mentioned in
//! a query.
//!
//! A tool's exposed name is the one the model sees and calls (`web__search`, where two servers
//! name a tool `search`); the catalog assigns it, so it is given to the lookup rather than
//! stored with BM25. Only exposed names that differ from the tool's name are kept.
//!
//! Keys are folded (NFKC-normalised as BM25 text is, lower-cased, whitespace runs collapsed
//! to one space) and hashed; the index is one sorted array of `(hash, row, kind)`, so building
//! it allocates no per-key strings (opening a router stays quick at any N: docs/design.md, "Index storage") and a
//! look-up is a binary search plus a check of the few candidate rows against the real names.

use super::table::StrTable;
use crate::tokenize::{is_compound_name, normalized};

/// Characters that end a name where it is mentioned in running text, besides whitespace:
/// `call get_weather(city)` or `use "get_weather", then ...`.
const MENTION_DELIMITERS: &[char] =
    &[',', ';', '(', ')', '[', ']', '{', '}', '<', '>', '"', '\'', '`', '|', '='];

/// The longest name, in whitespace-separated words, that a mention can span. Names with
/// more words than this are still found by [`NameLookup::rows_named`].
const MAX_MENTION_WORDS: usize = 8;

/// What a key of the index is for its row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    /// The tool name, a single word (`search`): never counted as a mention.
    PlainName,
    /// The tool name, compound (`get_weather`).
    CompoundName,
    /// The `server/name` id.
    Id,
    /// The exposed name, where it differs from the tool name: counted as a mention wherever
    /// it appears, even as one plain word, since it is the name the model repeats.
    Exposed,
}

/// How a name given to [`NameLookup::rows_named`] meets a row, strongest first; only the rows
/// met the strongest way are named.
///
/// The exposed name is what the model sees and calls, so it comes before a tool name (or id)
/// spelled like it: beside `x` on `a` and `b` (exposed `a__x`, `b__x`), `a__x` names a's tool,
/// not c's tool named `a__x` (exposed `c__a__x`). The catalog keeps exposed names unique
/// ignoring case, since some clients fold case, so one in another case still names one tool
/// and comes before tool names too.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Precedence {
    ExposedExact,
    ExposedFolded,
    NameExact,
    NameFolded,
}

/// Sorted `(hash of folded key, row, kind)` entries, derived from names and servers, plus the
/// exposed names given.
#[derive(Debug, Default)]
pub(super) struct NameLookup {
    entries: Vec<(u64, u32, Kind)>,
    /// Most whitespace-separated words in any mentionable key.
    max_words: usize,
    /// `(row, exposed name)`, ascending by row, each row once.
    exposed: Vec<(u32, String)>,
}

/// Normalises `text` to NFKC, lower-cases it and collapses each whitespace run to one space
/// (trimming the ends). NFKC as the BM25 analyser does, so a name typed with a decomposed
/// accent (`cafe` + U+0301, as macOS types it) or in full-width forms names the tool its
/// words already find.
fn fold(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    fold_into(text, &mut out);
    out
}

/// [`fold`] appending to `out`, so a caller can reuse one buffer.
fn fold_into(text: &str, out: &mut String) {
    let start = out.len();
    let text = normalized(text);
    for word in text.split_whitespace() {
        if out.len() > start {
            out.push(' ');
        }
        if word.is_ascii() {
            out.extend(word.bytes().map(|b| char::from(b.to_ascii_lowercase())));
        } else {
            out.extend(word.chars().flat_map(char::to_lowercase));
        }
    }
}

/// FNV-1a over the folded key's bytes: fast on short names and stable across builds. A
/// collision only costs one extra candidate check, since every match is verified.
fn hash_key(folded: &str) -> u64 {
    folded
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

fn id_of(names: &StrTable, servers: &StrTable, row: usize) -> Option<String> {
    let server = servers.get(row);
    (!server.is_empty()).then(|| format!("{server}/{}", names.get(row)))
}

impl NameLookup {
    /// Indexes tool `names` and their `servers` (parallel tables, one entry per row).
    pub(super) fn new(names: &StrTable, servers: &StrTable) -> Self {
        let mut lookup = Self {
            entries: Vec::with_capacity(2 * names.len()),
            max_words: 0,
            exposed: Vec::new(),
        };
        let mut key = String::new();
        for row in 0..names.len() {
            let row32 = u32::try_from(row).expect("row count checked at build");
            let name = names.get(row);
            let kind = if is_compound_name(name) { Kind::CompoundName } else { Kind::PlainName };
            key.clear();
            fold_into(name, &mut key);
            lookup.add(&key, row32, kind);
            let server = servers.get(row);
            if !server.is_empty() {
                key.clear();
                fold_into(server, &mut key);
                key.push('/');
                fold_into(name, &mut key);
                lookup.add(&key, row32, Kind::Id);
            }
        }
        lookup.entries.sort_unstable();
        lookup
    }

    /// Replaces the exposed names with `exposed` (`(row, name)`, rows in range and each
    /// once), leaving out those equal to their tool's name.
    pub(super) fn set_exposed(&mut self, exposed: &[(u32, &str)], names: &StrTable) {
        self.entries.retain(|entry| entry.2 != Kind::Exposed);
        self.exposed = exposed
            .iter()
            .filter(|&&(row, name)| names.get(row as usize) != name)
            .map(|&(row, name)| (row, name.to_owned()))
            .collect();
        self.exposed.sort_unstable();
        let keys: Vec<(String, u32)> =
            self.exposed.iter().map(|(row, name)| (fold(name), *row)).collect();
        for (key, row) in keys {
            self.add(&key, row, Kind::Exposed);
        }
        self.entries.sort_unstable();
    }

    /// The exposed name of `row`, if it differs from the tool name.
    fn exposed_name(&self, row: u32) -> Option<&str> {
        let at = self.exposed.binary_search_by_key(&row, |entry| entry.0).ok()?;
        Some(&self.exposed[at].1)
    }

    fn add(&mut self, folded: &str, row: u32, kind: Kind) {
        if kind != Kind::PlainName {
            let words = 1 + folded.bytes().filter(|&b| b == b' ').count();
            if words <= MAX_MENTION_WORDS {
                self.max_words = self.max_words.max(words);
            }
        }
        self.entries.push((hash_key(folded), row, kind));
    }

    /// Entries whose key folds to `folded`, verified against the real names.
    fn matches<'a>(
        &'a self,
        folded: &'a str,
        names: &'a StrTable,
        servers: &'a StrTable,
    ) -> impl Iterator<Item = (u32, Kind)> + 'a {
        let hash = hash_key(folded);
        let start = self.entries.partition_point(|e| e.0 < hash);
        self.entries[start..].iter().take_while(move |e| e.0 == hash).filter_map(move |e| {
            let row = e.1 as usize;
            let key = match e.2 {
                Kind::Id => id_of(names, servers, row).map(|id| fold(&id)),
                Kind::Exposed => self.exposed_name(e.1).map(fold),
                Kind::PlainName | Kind::CompoundName => Some(fold(names.get(row))),
            };
            (key.as_deref() == Some(folded)).then_some((e.1, e.2))
        })
    }

    /// Rows `name` names, by the first of these that any row meets (see [`Precedence`]): its
    /// exposed name equals `name`, then equals it ignoring case; its tool name or
    /// `server/name` id equals `name`, then equals it ignoring case. Sorted ascending.
    pub(super) fn rows_named(&self, name: &str, names: &StrTable, servers: &StrTable) -> Vec<u32> {
        let folded = fold(name);
        let mut best: Option<Precedence> = None;
        let mut rows = Vec::new();
        for (row, kind) in self.matches(&folded, names, servers) {
            let precedence = self.precedence(row, kind, name, names, servers);
            if best.is_none_or(|b| precedence < b) {
                best = Some(precedence);
                rows.clear();
            }
            if best == Some(precedence) {
                rows.push(row);
            }
        }
        rows.sort_unstable();
        rows.dedup();
        rows
    }

    /// How strongly a `(row, kind)` entry whose key folds like `name` names its row.
    fn precedence(
        &self,
        row: u32,
        kind: Kind,
        name: &str,
        names: &StrTable,
        servers: &StrTable,
    ) -> Precedence {
        let r = row as usize;
        match kind {
            Kind::Exposed if self.exposed_name(row) == Some(name) => Precedence::ExposedExact,
            Kind::Exposed => Precedence::ExposedFolded,
            Kind::Id if id_of(names, servers, r).is_some_and(|id| id == name) => {
                Precedence::NameExact
            }
            Kind::PlainName | Kind::CompoundName if names.get(r) == name => Precedence::NameExact,
            Kind::Id | Kind::PlainName | Kind::CompoundName => Precedence::NameFolded,
        }
    }

    /// Rows whose compound name, id or exposed name appears verbatim (ignoring case) in
    /// `query` as a whole word sequence, plus the rows of any name (even a one-word one) that
    /// is the whole query. Sorted ascending, no duplicates. The cost is a few look-ups per word of
    /// the query, independent of the number of tools.
    pub(super) fn mentioned(&self, query: &str, names: &StrTable, servers: &StrTable) -> Vec<u32> {
        let folded = normalized(query).to_lowercase();
        let words: Vec<&str> = folded
            .split(|c: char| c.is_whitespace() || MENTION_DELIMITERS.contains(&c))
            .filter(|w| !w.is_empty())
            .collect();
        let mut rows = Vec::new();
        let mut key = String::new();
        for start in 0..words.len() {
            key.clear();
            for (extra, word) in words[start..].iter().take(self.max_words).enumerate() {
                if extra > 0 {
                    key.push(' ');
                }
                key.push_str(word);
                // Sentence punctuation around a name (`get_weather.`, `:get_weather`) is not
                // part of it; names start and end with a letter, digit or underscore.
                let trimmed = key.trim_matches(|c: char| !c.is_alphanumeric() && c != '_');
                let candidates = if trimmed == key { &[trimmed][..] } else { &[&key, trimmed][..] };
                for candidate in candidates {
                    rows.extend(
                        self.matches(candidate, names, servers)
                            .filter(|&(_, kind)| kind != Kind::PlainName)
                            .map(|(row, _)| row),
                    );
                }
            }
        }
        // A query that is nothing but a tool name names that tool, even a one-word one.
        let whole = fold(query);
        let whole = whole.trim_matches(|c: char| !c.is_alphanumeric() && c != '_');
        rows.extend(self.matches(whole, names, servers).map(|(row, _)| row));
        rows.sort_unstable();
        rows.dedup();
        rows
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tables() -> (StrTable, StrTable) {
        let names = ["get_weather", "search", "Get Stock Price", "math.sum", "get_weather"];
        let servers = ["wx", "web", "fin", "", "other"];
        (StrTable::from_strs(names), StrTable::from_strs(servers))
    }

    #[test]
    fn finds_rows_by_name_and_id() {
        let (names, servers) = tables();
        let l = NameLookup::new(&names, &servers);
        let named = |s: &str| l.rows_named(s, &names, &servers);
        assert_eq!(named("get_weather"), [0, 4]);
        assert_eq!(named("other/get_weather"), [4]);
        assert_eq!(named("GET_WEATHER"), [0, 4]);
        assert_eq!(named("math.sum"), [3]);
        assert_eq!(named("get  stock PRICE"), [2]);
        assert_eq!(named("/math.sum"), Vec::<u32>::new());
        assert_eq!(named("weather"), Vec::<u32>::new());
    }

    #[test]
    fn names_meet_in_any_unicode_normal_form() {
        // Composed (NFC) in the catalog, typed decomposed (NFD, as macOS types it) or in
        // full-width forms: one name, as the BM25 analyser reads them.
        let names = StrTable::from_strs(["caf\u{e9}_order", "\u{ff53}\u{ff55}\u{ff4d}"]);
        let servers = StrTable::from_strs(["shop", ""]);
        let l = NameLookup::new(&names, &servers);
        let named = |s: &str| l.rows_named(s, &names, &servers);
        assert_eq!(named("cafe\u{301}_order"), [0]);
        assert_eq!(named("CAFE\u{301}_ORDER"), [0]);
        assert_eq!(named("shop/cafe\u{301}_order"), [0]);
        assert_eq!(named("sum"), [1]);
        let mentioned = |s: &str| l.mentioned(s, &names, &servers);
        assert_eq!(mentioned("please run cafe\u{301}_order now"), [0]);
        assert_eq!(mentioned("\u{ff53}\u{ff55}\u{ff4d}"), [1]);
    }

    #[test]
    fn finds_mentions() {
        let (names, servers) = tables();
        let l = NameLookup::new(&names, &servers);
        let mentioned = |s: &str| l.mentioned(s, &names, &servers);
        assert_eq!(mentioned("call get_weather for Paris"), [0, 4]);
        assert_eq!(mentioned("Use `wx/get_weather`."), [0]);
        assert_eq!(mentioned("first get_weather(city), then math.sum."), [0, 3, 4]);
        assert_eq!(mentioned("please get   stock price of ACME"), [2]);
        assert_eq!(mentioned("search the web for get weather"), Vec::<u32>::new());
        assert_eq!(mentioned("get_weathers"), Vec::<u32>::new());
        assert_eq!(mentioned(" Search. "), [1]);
    }

    #[test]
    fn exposed_names_are_named_and_mentioned_after_the_tool_names() {
        let (names, servers) = tables();
        let mut l = NameLookup::new(&names, &servers);
        // Row 1's exposed name is one plain word, row 0's is its own name: left out.
        let exposed =
            [(4, "other__get_weather"), (1, "websearch"), (0, "get_weather"), (2, "Math.Sum")];
        l.set_exposed(&exposed, &names);
        let named = |s: &str| l.rows_named(s, &names, &servers);
        assert_eq!(named("OTHER__get_weather"), [4]);
        assert_eq!(named("websearch"), [1]);
        assert_eq!(named("MATH.SUM"), [2], "an exposed name, in any case, before a tool name");
        let mentioned = |s: &str| l.mentioned(s, &names, &servers);
        assert_eq!(mentioned("then **Other__Get_Weather**, please"), [4]);
        assert_eq!(mentioned("try websearch, or (websearch)"), [1]);
        assert_eq!(mentioned("websearches"), Vec::<u32>::new());
        l.set_exposed(&[(3, "math_sum")], &names);
        assert_eq!(l.mentioned("try websearch or math_sum", &names, &servers), [3]);
    }

    #[test]
    fn an_exposed_name_names_its_tool_before_a_tool_name_spelled_like_it() {
        // The catalog's case: `x` on `a` and `b` are exposed as `a__x` and `b__x`, and c's
        // own `a__x` steps aside as `c__a__x`. The model calls `a__x` meaning a's tool.
        let names = StrTable::from_strs(["x", "x", "a__x", "B__X"]);
        let servers = StrTable::from_strs(["a", "b", "c", "d"]);
        let mut l = NameLookup::new(&names, &servers);
        l.set_exposed(&[(0, "a__x"), (1, "b__x"), (2, "c__a__x"), (3, "d__B__X")], &names);
        let named = |s: &str| l.rows_named(s, &names, &servers);
        assert_eq!(named("a__x"), [0], "the exposed name, exactly");
        assert_eq!(named("x"), [0, 1], "no exposed name: the tool names");
        assert_eq!(named("c/a__x"), [2], "no exposed name: the id");
        assert_eq!(named("A__X"), [0], "an exposed name in another case still names its tool");
        assert_eq!(named("B__X"), [1], "exposed in another case, before a tool name exactly");
        assert_eq!(named("d/B__X"), [3]);
        assert_eq!(named("C__A__X"), [2]);
    }
}
