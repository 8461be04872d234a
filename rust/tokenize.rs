//! The text analyser shared by BM25 indexing and querying.
//!
//! One pipeline for every field and for queries, so a query term and a document term meet
//! exactly when they analyse to the same string:
//!
//! 0. **Normalise** to NFKC, so a decomposed accent (`cafe` + U+0301, as macOS types it)
//!    meets the composed one and full-width forms (`ｉＰｈｏｎｅ１５`) meet their ASCII ones.
//! 1. **Split into words** at every character that is neither alphanumeric (Unicode-aware)
//!    nor a combining mark, so `_`, `-`, `.`, `/`, whitespace and punctuation all separate
//!    words, and a Thai tone mark or a Devanagari virama stays inside its word.
//! 2. **Split identifiers** inside a word at case and digit boundaries: `getWeather` ->
//!    `get` `Weather`; an acronym ends before its last capital when a lowercase letter follows
//!    (`getHTTPResponse` -> `get` `HTTP` `Response`); letters and digits part (`ipv4` ->
//!    `ipv` `4`, `46elks` -> `46` `elks`). A word that splits also yields itself whole, so
//!    `GitHub` gives `git`, `hub` and `github`, and a query typed in lower case (`github`,
//!    `ipv4`) still meets it. A run of CJK characters (Han, kana, Hangul) inside a word is
//!    cut from the rest and yields its overlapping pairs instead (`北京的天气` -> `北京`
//!    `京的` `的天` `天气`; a lone character yields itself), as Lucene's CJKAnalyzer does:
//!    Chinese and Japanese write no spaces, and a whole run would meet no other text.
//! 3. **Lower-case** each part (full Unicode lower-casing), with `ß` as `ss` (`Straße`
//!    meets `STRASSE`), `İ` as `i` (`İSTANBUL` meets `Istanbul`) and final `ς` as `σ`
//!    (`ΟΔΟΣ` meets `οδος`).
//! 4. **Drop stop words** from [`STOP_WORDS`], a short list of English function words that
//!    never name a tool's purpose (skipped by [`analyze_keep_stop_words`]).
//! 5. **Stem** with [`stem`], the English Snowball stemmer.
//!
//! Everything is deterministic and independent of locale.

use std::borrow::Cow;
use std::collections::HashSet;
use std::sync::LazyLock;

use rust_stemmers::{Algorithm, Stemmer};
use unicode_normalization::char::is_combining_mark;
use unicode_normalization::{is_nfkc_quick, IsNormalized, UnicodeNormalization};

/// English function words dropped from documents and queries. Kept short on purpose: verbs
/// such as `get`, `list`, `set` or `send` carry meaning in tool names and stay in.
pub const STOP_WORDS: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "been", "but", "by", "can", "could", "do", "does",
    "for", "from", "had", "has", "have", "how", "i", "if", "in", "into", "is", "it", "its", "me",
    "my", "of", "on", "or", "our", "please", "should", "so", "that", "the", "their", "them",
    "then", "there", "these", "they", "this", "those", "to", "was", "we", "were", "what", "when",
    "where", "which", "who", "will", "with", "would", "you", "your",
];

/// Whether `word` (already lower-cased) is in [`STOP_WORDS`].
pub fn is_stop_word(word: &str) -> bool {
    STOP_WORDS.contains(&word)
}

/// Calls `emit` with each identifier part of `text`, in order, as a slice of `text` (not yet
/// lower-cased): steps 1 and 2 of the module's pipeline.
pub fn for_each_part<'t>(text: &'t str, mut emit: impl FnMut(&'t str)) {
    for word in words(text) {
        split_identifier(word, &mut emit);
    }
}

/// The maximal runs of alphanumeric characters and combining marks in `text`.
fn words(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !(c.is_alphanumeric() || is_combining_mark(c))).filter(|w| !w.is_empty())
}

/// `text` in NFKC (step 0), borrowed when it already is (all ASCII text is).
pub(crate) fn normalized(text: &str) -> Cow<'_, str> {
    if text.is_ascii() || is_nfkc_quick(text.chars()) == IsNormalized::Yes {
        return Cow::Borrowed(text);
    }
    Cow::Owned(text.nfkc().collect())
}

/// Whether `c` is of a script written without spaces between words, or (Hangul) with
/// particles joined to them: Han ideographs, Hiragana, Katakana and Hangul, with their
/// half-width and compatibility forms. Such runs are indexed as character pairs.
pub(crate) fn is_cjk(c: char) -> bool {
    matches!(c,
        '\u{1100}'..='\u{11FF}' // Hangul Jamo
        | '\u{3005}' | '\u{3007}' // 々 (iteration mark), 〇
        | '\u{3040}'..='\u{30FF}' // Hiragana, Katakana (with ー)
        | '\u{3131}'..='\u{318F}' // Hangul compatibility Jamo
        | '\u{31F0}'..='\u{31FF}' // Katakana phonetic extensions
        | '\u{3400}'..='\u{4DBF}' // CJK extension A
        | '\u{4E00}'..='\u{9FFF}' // CJK unified ideographs
        | '\u{A960}'..='\u{A97F}' // Hangul Jamo extended A
        | '\u{AC00}'..='\u{D7FF}' // Hangul syllables, Jamo extended B
        | '\u{F900}'..='\u{FAFF}' // CJK compatibility ideographs
        | '\u{FF66}'..='\u{FFDC}' // half-width Katakana and Hangul
        | '\u{20000}'..='\u{323AF}' // CJK extensions B to H, compatibility supplement
    )
}

/// Calls `emit` with each script run of `word`: `(true, run)` for a run of CJK characters
/// ([`is_cjk`]), `(false, run)` for the rest, in order. An ASCII word is one run.
fn for_each_run<'t>(word: &'t str, mut emit: impl FnMut(bool, &'t str)) {
    if word.is_ascii() {
        return emit(false, word);
    }
    let mut start = 0;
    let mut in_cjk = None;
    for (at, c) in word.char_indices() {
        let cjk = is_cjk(c);
        if in_cjk.is_some_and(|was| was != cjk) {
            emit(!cjk, &word[start..at]);
            start = at;
        }
        in_cjk = Some(cjk);
    }
    if let Some(cjk) = in_cjk {
        emit(cjk, &word[start..]);
    }
}

/// Calls `emit` with each pair of adjacent characters of the CJK run `run` (the run itself
/// when it is one character): the terms a CJK run is indexed as.
fn cjk_bigrams<'t>(run: &'t str, emit: &mut impl FnMut(&'t str)) {
    let mut starts = run.char_indices().map(|(at, _)| at).chain([run.len()]);
    let (Some(mut first), Some(mut second)) = (starts.next(), starts.next()) else { return };
    let Some(mut third) = starts.next() else { return emit(run) };
    loop {
        emit(&run[first..third]);
        (first, second) = (second, third);
        match starts.next() {
            Some(next) => third = next,
            None => return,
        }
    }
}

/// Splits one run of alphanumeric characters at case and letter/digit boundaries.
fn split_identifier<'t>(word: &'t str, emit: &mut impl FnMut(&'t str)) {
    let mut chars = word.char_indices().peekable();
    let Some((_, mut prev)) = chars.next() else { return };
    let mut start = 0;
    while let Some((at, cur)) = chars.next() {
        let next = chars.peek().map(|&(_, c)| c);
        let camel = prev.is_lowercase() && cur.is_uppercase();
        // `HTTPResponse`: the `R` starts a new word because a lowercase letter follows it.
        let acronym_end =
            prev.is_uppercase() && cur.is_uppercase() && next.is_some_and(|n| n.is_lowercase());
        let digit_edge = prev.is_numeric() != cur.is_numeric();
        if camel || acronym_end || digit_edge {
            emit(&word[start..at]);
            start = at;
        }
        prev = cur;
    }
    emit(&word[start..]);
}

/// The English Snowball (Porter 2) stem of `word` (already lower-cased), for ASCII-alphabetic
/// words; other scripts, digits and mixed words pass unchanged, since the English rules
/// would only mangle them.
///
/// Full stemming, not just plural stripping, so `translate`, `translates` and `translation`
/// or `booking` and `book` meet; it ranked better than the plural stripper it replaced on both
/// dev sets (docs/design.md, "BM25"). Stems are index terms, not words (`entries` ->
/// `entri`); they are never shown to anyone.
pub fn stem(word: &str) -> Cow<'_, str> {
    static ENGLISH: LazyLock<Stemmer> = LazyLock::new(|| Stemmer::create(Algorithm::English));
    if !word.bytes().all(|b| b.is_ascii_alphabetic()) {
        return Cow::Borrowed(word);
    }
    ENGLISH.stem(word)
}

/// Runs the full pipeline over `text`, calling `emit` with each analysed term. Terms are
/// lent, not allocated: a caller that keeps one copies it.
pub fn analyze(text: &str, emit: impl FnMut(&str)) {
    analyze_with(text, true, emit);
}

/// Like [`analyze`] but keeps stop words: used where the user spelled a term on purpose
/// (ToolSearch `+term` queries) and for the name-term index those queries read.
pub fn analyze_keep_stop_words(text: &str, emit: impl FnMut(&str)) {
    analyze_with(text, false, emit);
}

fn analyze_with(text: &str, drop_stop_words: bool, mut emit: impl FnMut(&str)) {
    let text = normalized(text);
    let mut lower = String::new();
    let mut emit_term = |raw: &str| {
        lower_into(raw, &mut lower);
        if !(drop_stop_words && is_stop_word(&lower)) {
            emit(&stem(&lower));
        }
    };
    for word in words(&text) {
        for_each_run(word, |cjk, run| {
            if cjk {
                return cjk_bigrams(run, &mut emit_term);
            }
            let mut parts = 0;
            split_identifier(run, &mut |part| {
                parts += 1;
                emit_term(part);
            });
            if parts > 1 {
                emit_term(run);
            }
        });
    }
}

/// Writes `raw` lower-cased (full Unicode lower-casing, `ß` as `ss`, `İ` as `i`, final `ς`
/// as `σ`) into `out`, replacing what it held.
fn lower_into(raw: &str, out: &mut String) {
    out.clear();
    if raw.is_ascii() {
        out.extend(raw.bytes().map(|b| char::from(b.to_ascii_lowercase())));
        return;
    }
    for c in raw.chars().flat_map(char::to_lowercase) {
        match c {
            'ß' => out.push_str("ss"),
            // Final sigma is sigma, as case folding has it: `ΟΔΟΣ` lower-cases char by char
            // to a sigma at its end, and must meet `οδος` as written.
            'ς' => out.push('σ'),
            // `İ` (Turkish capital dotted I) lower-cases to `i` and this dot: drop it, so
            // `İSTANBUL` meets `Istanbul`.
            '\u{307}' if out.ends_with('i') => {}
            _ => out.push(c),
        }
    }
}

/// The analysed terms of `text`, each once: what [`name_coverage`] looks names up in.
pub fn term_set(text: &str) -> HashSet<String> {
    let mut terms = HashSet::new();
    analyze(text, |term| {
        if !terms.contains(term) {
            terms.insert(term.to_owned());
        }
    });
    terms
}

/// The share of `name`'s words that a query holds, `query` being its [`term_set`]: each
/// identifier part of the name that is not a stop word counts once (`get_current_weather`:
/// three), and a word the query holds whole covers all of its parts (`github` covers `GitHub`).
/// 0 for a name of no such part.
pub fn name_coverage(name: &str, query: &HashSet<String>) -> f32 {
    let (mut parts, mut covered) = (0usize, 0usize);
    let mut lower = String::new();
    let name = normalized(name);
    let mut runs = Vec::new();
    for word in words(&name) {
        for_each_run(word, |cjk, run| runs.push((cjk, run)));
    }
    for (cjk, word) in runs {
        if cjk {
            // The run's words are its pairs, as the analyser indexes it.
            cjk_bigrams(word, &mut |pair| {
                parts += 1;
                covered += usize::from(query.contains(pair));
            });
            continue;
        }
        let (mut word_parts, mut word_covered) = (0usize, 0usize);
        split_identifier(word, &mut |part| {
            lower_into(part, &mut lower);
            if !is_stop_word(&lower) {
                word_parts += 1;
                word_covered += usize::from(query.contains(stem(&lower).as_ref()));
            }
        });
        lower_into(word, &mut lower);
        if query.contains(stem(&lower).as_ref()) {
            word_covered = word_parts;
        }
        parts += word_parts;
        covered += word_covered;
    }
    if parts == 0 {
        return 0.0;
    }
    covered as f32 / parts as f32
}

/// The analysed terms of `text`, in order, duplicates kept.
pub fn terms(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    analyze(text, |t| out.push(t.to_owned()));
    out
}

/// Whether a tool name reads as a compound identifier (`get_weather`, `math.sum`,
/// `listIssues`, `server/name`) rather than a single word (`search`, `Read`). Only compound
/// names count as "mentioned" when they appear verbatim in a query: a one-word name is plain
/// English and would otherwise be pinned to every query that uses the word.
pub fn is_compound_name(name: &str) -> bool {
    let mut prev2: Option<char> = None;
    let mut prev: Option<char> = None;
    for c in name.chars() {
        if let Some(p) = prev {
            let camel = p.is_lowercase() && c.is_uppercase();
            let separated = prev2.is_some_and(char::is_alphanumeric)
                && !p.is_alphanumeric()
                && c.is_alphanumeric();
            if camel || separated {
                return true;
            }
        }
        prev2 = prev;
        prev = Some(c);
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(text: &str) -> Vec<&str> {
        let mut out = Vec::new();
        for_each_part(text, |p| out.push(p));
        out
    }

    #[test]
    fn name_coverage_counts_the_parts_a_query_holds() {
        let query = term_set("What's the current weather in Paris? Also check github");
        assert_eq!(name_coverage("get_current_weather", &query), 2.0 / 3.0);
        assert_eq!(name_coverage("getCurrentWeather", &query), 2.0 / 3.0);
        assert_eq!(name_coverage("weather", &query), 1.0);
        // A word held whole covers its parts; the parts alone count one by one.
        assert_eq!(name_coverage("GitHub", &query), 1.0);
        assert_eq!(name_coverage("GitLab", &term_set("git")), 0.5);
        // Stems meet: "bookings" and "book".
        assert_eq!(name_coverage("list_bookings", &term_set("book a table")), 0.5);
        // Stop words count for neither side; a name of nothing else is covered 0.
        assert_eq!(name_coverage("do_it", &query), 0.0);
        assert_eq!(name_coverage("", &query), 0.0);
        assert_eq!(name_coverage("send_email", &term_set("")), 0.0);
    }

    #[test]
    fn splits_identifiers() {
        assert_eq!(parts("get_weather"), ["get", "weather"]);
        assert_eq!(parts("getWeather"), ["get", "Weather"]);
        assert_eq!(parts("getHTTPResponse"), ["get", "HTTP", "Response"]);
        assert_eq!(parts("HTTPServer2go"), ["HTTP", "Server", "2", "go"]);
        assert_eq!(parts("46elks-sms.v2/send"), ["46", "elks", "sms", "v", "2", "send"]);
        assert_eq!(parts("  ..__ "), Vec::<&str>::new());
        assert_eq!(parts("ÉtatCivil"), ["État", "Civil"]);
        assert_eq!(parts("東京weather"), ["東京weather"]);
    }

    #[test]
    fn stems_english_words_only() {
        let cases = [
            ("entries", "entri"),
            ("entry", "entri"),
            ("addresses", "address"),
            ("boxes", "box"),
            ("matches", "match"),
            ("files", "file"),
            ("translation", "translat"),
            ("translates", "translat"),
            ("booking", "book"),
            ("status", "status"),
            ("access", "access"),
            ("analysis", "analysi"),
            ("keys", "key"),
            ("gas", "gas"),
            ("données", "données"),
            ("ipv4", "ipv4"),
            ("", ""),
        ];
        for (word, want) in cases {
            assert_eq!(stem(word), want, "{word}");
        }
    }

    #[test]
    fn analyses_with_stop_words_and_stemming() {
        assert_eq!(
            terms("Get the listOfFiles for my repos"),
            ["get", "list", "file", "listoffil", "repo"]
        );
        assert_eq!(terms("GitHub"), ["git", "hub", "github"]);
        let mut kept = Vec::new();
        analyze_keep_stop_words("list_all_the_files", |t| kept.push(t.to_owned()));
        assert_eq!(kept, ["list", "all", "the", "file"]);
    }

    #[test]
    fn bigrams_cjk_runs() {
        // Chinese and Japanese write no spaces: each run of CJK characters indexes as its
        // overlapping pairs, a lone character as itself, as Lucene's CJKAnalyzer does.
        assert_eq!(terms("北京的天气"), ["北京", "京的", "的天", "天气"]);
        assert_eq!(terms("天気予報を"), ["天気", "気予", "予報", "報を"]);
        assert_eq!(terms("東京weather"), ["東京", "weather"]);
        assert_eq!(terms("getWeather天"), ["get", "weather", "getweath", "天"]);
        assert_eq!(terms("에어컨을 켜"), ["에어", "어컨", "컨을", "켜"]);
        // A CJK tool name's words are its pairs: a request holding two of three covers 2/3.
        assert_eq!(name_coverage("天気予報", &term_set("明日の天気予")), 2.0 / 3.0);
    }

    #[test]
    fn normalises_before_splitting() {
        // NFD (macOS input, some catalogs) meets NFC: the combining accent stays in its word.
        assert_eq!(terms("cafe\u{301}"), terms("café"));
        assert_eq!(terms("cafe\u{301}"), ["café"]);
        // Full-width letters and digits (Japanese input) meet their ASCII forms.
        assert_eq!(terms("ｉＰｈｏｎｅ１５"), terms("iPhone15"));
        // A Thai tone mark or a Devanagari virama does not cut its word in two.
        assert_eq!(terms("ช่วย"), ["ช่วย"]);
        assert_eq!(terms("नमस्ते"), ["नमस्ते"]);
        // German sharp s folds to "ss", as a keyboard without it types the word (then stems).
        assert_eq!(terms("Straße STRASSE STRAẞE"), ["strass", "strass", "strass"]);
        assert_eq!(name_coverage("cafe\u{301}_bestellen", &term_set("Café bestellen")), 1.0);
    }

    #[test]
    fn folds_turkish_capital_dotted_i_to_i() {
        // `İ` lower-cases to `i` and a combining dot: `İSTANBUL` must meet `Istanbul`.
        assert_eq!(terms("İSTANBUL İzmir"), terms("Istanbul izmir"));
        assert_eq!(terms("İstanbul"), ["istanbul"]);
    }

    #[test]
    fn recognises_compound_names() {
        for name in ["get_weather", "math.sum", "listIssues", "github/search", "send-sms"] {
            assert!(is_compound_name(name), "{name}");
        }
        for name in ["search", "Read", "HTTP", "s3", "_private"] {
            assert!(!is_compound_name(name), "{name}");
        }
    }
}
