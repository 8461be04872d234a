//! The BM25 index file: one self-checking file, written atomically.
//!
//! Layout, little-endian:
//!
//! | bytes | content |
//! |---|---|
//! | 0..8 | magic `TGBM25\0\0` |
//! | 8..12 | format version (`u32`, currently 6) |
//! | 12..16 | reserved, 0 |
//! | 16..24 | payload length in bytes (`u64`) |
//! | 24..28 | CRC-32 of the payload |
//! | 28..32 | reserved, 0 |
//! | 32.. | payload |
//!
//! The payload holds the parameters (six `f32`: k1, b, then the name, description, params and
//! server weights) followed by arrays, each prefixed by its element count as a `u64`: tool
//! names and servers, the sorted vocabulary, postings (offsets, rows, weighted term
//! frequencies), document lengths, then the id-term vocabulary and its postings. String
//! tables are a UTF-8 blob plus `u32` offsets. Everything derived (idf, length norms, name
//! hash maps) is recomputed on load, so a file cannot hold inconsistent derived data.

use std::fs::{self, File};
use std::io::{Read, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use super::table::{RowLists, StrTable};
use super::{Bm25Index, Bm25Params, FieldWeights};
use crate::error::{Error, Result};
use crate::matrix_file::{create_private, open_regular};
use crate::tokenize::{analyze_keep_stop_words, is_cjk};

const MAGIC: &[u8; 8] = b"TGBM25\0\0";
/// Version 2: terms are Snowball stems (version 1 stripped plurals only). Version 3: a run of
/// CJK characters is indexed as its character pairs. Version 4: text is NFKC-normalised,
/// combining marks stay in their words and `ß` is `ss`. Version 5: `İ` lower-cases to `i`
/// (no combining dot). Version 6: final `ς` lower-cases to `σ`. The stored terms are the
/// analyser's output, so a file from another analyser would silently miss queries: it is refused
/// instead, but for an older file whose terms this analyser makes alike (every ASCII term,
/// since only other text is analysed otherwise now).
pub const VERSION: u32 = 6;
/// The oldest version read (when its terms analyse alike).
const OLDEST_VERSION: u32 = 2;
const HEADER_LEN: usize = 32;
/// Largest file read (1 GiB, ten times a million-tool index): a bound on what a hostile or
/// mistaken path makes the loader allocate.
const MAX_FILE_LEN: u64 = 1 << 30;

impl Bm25Index {
    /// Writes the index to `path` atomically: a temporary file in the same directory is
    /// written, flushed to disk, then renamed over `path`, so readers see the old file or
    /// the new one, never a mix.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        write_atomically(path.as_ref(), &self.to_bytes())
    }

    /// Reads an index written by [`Bm25Index::save`]. A file that is truncated, corrupted,
    /// of another format or version, or internally inconsistent is an [`Error::Format`].
    pub fn load(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let (file, metadata) = open_regular(path)?;
        if metadata.len() > MAX_FILE_LEN {
            return Err(Error::format(
                path,
                format!("{} bytes, more than a BM25 index holds ({MAX_FILE_LEN})", metadata.len()),
            ));
        }
        let mut bytes = Vec::with_capacity(metadata.len() as usize);
        // `take`: a file that grows while read is cut here, then refused by its length field.
        file.take(MAX_FILE_LEN + 1)
            .read_to_end(&mut bytes)
            .map_err(|source| Error::Io { path: path.into(), source })?;
        Self::from_bytes(&bytes).map_err(|reason| Error::format(path, reason))
    }

    fn to_bytes(&self) -> Vec<u8> {
        let mut payload = Vec::new();
        let p = &self.params;
        for value in [p.k1, p.b, p.weights.name, p.weights.description, p.weights.params] {
            payload.extend_from_slice(&value.to_le_bytes());
        }
        payload.extend_from_slice(&p.weights.server.to_le_bytes());
        put_table(&mut payload, &self.names);
        put_table(&mut payload, &self.servers);
        put_table(&mut payload, &self.terms);
        put_lists(&mut payload, &self.postings);
        put_f32s(&mut payload, &self.term_freqs);
        put_f32s(&mut payload, &self.doc_lens);
        put_table(&mut payload, &self.id_terms);
        put_lists(&mut payload, &self.id_postings);

        let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
        out.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&payload);
        out
    }

    fn from_bytes(bytes: &[u8]) -> Result<Self, String> {
        let (payload, version) = check_header(bytes)?;
        let mut r = Reader { bytes: payload, at: 0 };
        let mut floats = [0f32; 6];
        for value in &mut floats {
            *value = f32::from_le_bytes(r.take(4, "parameters")?.try_into().expect("4 bytes"));
        }
        let [k1, b, name, description, params, server] = floats;
        let params =
            Bm25Params { k1, b, weights: FieldWeights { name, description, params, server } };
        params.validate().map_err(|e| format!("bad parameters: {e}"))?;

        let names = r.table("tool names")?;
        let servers = r.table("servers")?;
        let terms = r.table("vocabulary")?;
        let postings = r.lists("postings")?;
        let term_freqs = r.f32s("term frequencies")?;
        let doc_lens = r.f32s("document lengths")?;
        let id_terms = r.table("id vocabulary")?;
        let id_postings = r.lists("id postings")?;
        if r.at != payload.len() {
            return Err(format!(
                "{} unexpected bytes after the last section",
                payload.len() - r.at
            ));
        }

        let n = names.len();
        names.check(false).map_err(|e| format!("tool names: {e}"))?;
        servers.check(false).map_err(|e| format!("servers: {e}"))?;
        terms.check(true).map_err(|e| format!("vocabulary: {e}"))?;
        id_terms.check(true).map_err(|e| format!("id vocabulary: {e}"))?;
        if servers.len() != n || doc_lens.len() != n {
            return Err(format!(
                "{n} tool names but {} servers and {} document lengths",
                servers.len(),
                doc_lens.len()
            ));
        }
        if version < VERSION {
            check_terms_analyse_alike(version, &terms)?;
            check_terms_analyse_alike(version, &id_terms)?;
        }
        check_lists_match(&postings, terms.len(), "postings")?;
        check_lists_match(&id_postings, id_terms.len(), "id postings")?;
        postings.check(n).map_err(|e| format!("postings: {e}"))?;
        id_postings.check(n).map_err(|e| format!("id postings: {e}"))?;
        if term_freqs.len() != postings.rows.len() {
            return Err(format!(
                "{} term frequencies for {} postings",
                term_freqs.len(),
                postings.rows.len()
            ));
        }
        if term_freqs.iter().any(|&tf| !(tf.is_finite() && tf > 0.0)) {
            return Err("a term frequency is not a finite positive number".into());
        }
        if doc_lens.iter().any(|&len| !(len.is_finite() && len >= 0.0)) {
            return Err("a document length is not a finite number >= 0".into());
        }
        Ok(Self::from_parts(
            params,
            names,
            servers,
            (terms, postings, term_freqs),
            doc_lens,
            (id_terms, id_postings),
        ))
    }
}

/// Refuses a file of an older `version` whose vocabulary `terms` holds a term the analyser
/// now makes into something else (a CJK run, once whole, now pairs; an NFD accent): no
/// query analysed now would meet it. ASCII terms analyse as they did in every version read.
/// A term may analyse to more than itself: a word split at a digit (`café2`) was indexed
/// whole and in parts then too.
fn check_terms_analyse_alike(version: u32, terms: &StrTable) -> Result<(), String> {
    let mut now = Vec::new();
    for term in (0..terms.len()).map(|i| terms.get(i)).filter(|t| !t.is_ascii()) {
        if version < FIRST_MARKS_VERSION && !term.chars().all(never_cut_at_a_mark) {
            return Err(format!(
                "BM25 index version {version} holds the term {term:?}, of a script whose \
                 words that version cut at combining marks (rebuild the router with \
                 'toolgate index')"
            ));
        }
        now.clear();
        analyze_keep_stop_words(term, |t| now.push(t.to_owned()));
        if !now.iter().any(|t| t == term) {
            return Err(format!(
                "BM25 index version {version} holds the term {term:?}, which this build \
                 analyses as {now:?} (rebuild the router with 'toolgate index')"
            ));
        }
    }
    Ok(())
}

/// The first version that keeps combining marks inside words (before it, `ช่วย` was
/// indexed as `ช` and `วย`, `नमस्ते` as `नमस` and `ते`: terms that analyse to themselves, yet
/// meet no query analysed now).
const FIRST_MARKS_VERSION: u32 = 4;

/// Whether the analysers before [`FIRST_MARKS_VERSION`] kept the words holding `c` whole:
/// Latin, Greek and Cyrillic letters take their accents composed (NFC), CJK characters take
/// none. Other scripts (Thai tone marks, Indic viramas, ...) were cut where no term shows.
fn never_cut_at_a_mark(c: char) -> bool {
    matches!(c, '\u{0}'..='\u{52F}' | '\u{1E00}'..='\u{1FFF}') || is_cjk(c)
}

/// Returns the payload and the format version after checking magic, version, length and
/// checksum.
fn check_header(bytes: &[u8]) -> Result<(&[u8], u32), String> {
    if bytes.len() < HEADER_LEN {
        return Err(format!(
            "truncated: {} bytes, shorter than the {HEADER_LEN}-byte header",
            bytes.len()
        ));
    }
    if &bytes[..8] != MAGIC {
        return Err("not a toolgate BM25 index (wrong magic bytes)".into());
    }
    let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
    let version = u32_at(8);
    if !(OLDEST_VERSION..=VERSION).contains(&version) {
        return Err(format!(
            "unsupported BM25 index version {version}; this build reads {OLDEST_VERSION} to {VERSION} \
             (rebuild the router with 'toolgate index')"
        ));
    }
    let payload_len = u64::from_le_bytes(bytes[16..24].try_into().expect("8 bytes"));
    let actual = (bytes.len() - HEADER_LEN) as u64;
    if payload_len != actual {
        let what = if actual < payload_len { "truncated" } else { "trailing bytes" };
        return Err(format!(
            "{what}: header gives a {payload_len}-byte payload, file holds {actual}"
        ));
    }
    let payload = &bytes[HEADER_LEN..];
    let (stored, computed) = (u32_at(24), crc32fast::hash(payload));
    if stored != computed {
        return Err(format!(
            "checksum mismatch (stored {stored:#010x}, computed {computed:#010x}): file is corrupted"
        ));
    }
    Ok((payload, version))
}

fn check_lists_match(lists: &RowLists, n_terms: usize, what: &str) -> Result<(), String> {
    if lists.offsets.len() != n_terms + 1 {
        return Err(format!("{what}: {} offsets for {n_terms} terms", lists.offsets.len()));
    }
    Ok(())
}

fn put_len(out: &mut Vec<u8>, len: usize) {
    out.extend_from_slice(&(len as u64).to_le_bytes());
}

fn put_u32s(out: &mut Vec<u8>, values: &[u32]) {
    put_len(out, values.len());
    out.extend(values.iter().flat_map(|v| v.to_le_bytes()));
}

fn put_f32s(out: &mut Vec<u8>, values: &[f32]) {
    put_len(out, values.len());
    out.extend(values.iter().flat_map(|v| v.to_le_bytes()));
}

fn put_table(out: &mut Vec<u8>, table: &StrTable) {
    put_len(out, table.blob.len());
    out.extend_from_slice(table.blob.as_bytes());
    put_u32s(out, &table.offsets);
}

fn put_lists(out: &mut Vec<u8>, lists: &RowLists) {
    put_u32s(out, &lists.offsets);
    put_u32s(out, &lists.rows);
}

/// A cursor over the payload whose every read is bounds-checked, so a corrupted count
/// becomes an error rather than a huge allocation or a panic.
struct Reader<'b> {
    bytes: &'b [u8],
    at: usize,
}

impl<'b> Reader<'b> {
    fn take(&mut self, len: usize, what: &str) -> Result<&'b [u8], String> {
        let left = self.bytes.len() - self.at;
        if len > left {
            return Err(format!(
                "truncated {what}: needs {len} bytes at payload offset {}, {left} left",
                self.at
            ));
        }
        let slice = &self.bytes[self.at..self.at + len];
        self.at += len;
        Ok(slice)
    }

    fn count(&mut self, element_size: usize, what: &str) -> Result<usize, String> {
        let raw = u64::from_le_bytes(self.take(8, what)?.try_into().expect("8 bytes"));
        usize::try_from(raw)
            .ok()
            .filter(|n| n.checked_mul(element_size).is_some())
            .ok_or_else(|| format!("{what}: impossible element count {raw}"))
    }

    fn u32s(&mut self, what: &str) -> Result<Vec<u32>, String> {
        let n = self.count(4, what)?;
        let raw = self.take(n * 4, what)?;
        Ok(raw
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
            .collect())
    }

    fn f32s(&mut self, what: &str) -> Result<Vec<f32>, String> {
        let n = self.count(4, what)?;
        let raw = self.take(n * 4, what)?;
        Ok(raw
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")))
            .collect())
    }

    fn table(&mut self, what: &str) -> Result<StrTable, String> {
        let len = self.count(1, what)?;
        let blob = std::str::from_utf8(self.take(len, what)?)
            .map_err(|e| format!("{what}: invalid UTF-8 ({e})"))?
            .to_owned();
        let offsets = self.u32s(what)?;
        if offsets.is_empty() {
            return Err(format!("{what}: no offsets"));
        }
        Ok(StrTable { blob, offsets })
    }

    fn lists(&mut self, what: &str) -> Result<RowLists, String> {
        let offsets = self.u32s(what)?;
        let rows = self.u32s(what)?;
        if offsets.is_empty() {
            return Err(format!("{what}: no offsets"));
        }
        Ok(RowLists { offsets, rows })
    }
}

/// Distinguishes temporary files of concurrent saves within one process.
static SAVE_COUNTER: AtomicU64 = AtomicU64::new(0);

fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    let io_error = |at: &Path| {
        let at = at.to_path_buf();
        move |source| Error::Io { path: at, source }
    };
    let file_name = path
        .file_name()
        .ok_or_else(|| Error::invalid(format!("{}: not a file path", path.display())))?;
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let tmp = dir.join(format!(
        ".{}.tmp-{}-{}",
        file_name.to_string_lossy(),
        std::process::id(),
        SAVE_COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let written = create_private(&tmp)
        .and_then(|mut file| {
            file.write_all(bytes)?;
            file.sync_all()
        })
        .and_then(|()| fs::rename(&tmp, path));
    if let Err(source) = written {
        // Best effort: the temporary file may not exist if creating it is what failed.
        let _ = fs::remove_file(&tmp);
        return Err(io_error(path)(source));
    }
    // The rename is durable only once the directory entry is on disk. Directories cannot be
    // opened as files on every platform, so this step is skipped where it is unsupported.
    if let Ok(dir_handle) = File::open(dir) {
        dir_handle
            .sync_all()
            .or_else(|e| match e.kind() {
                std::io::ErrorKind::InvalidInput | std::io::ErrorKind::PermissionDenied => Ok(()),
                _ => Err(e),
            })
            .map_err(io_error(dir))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::ToolDocument;
    use super::*;

    fn index() -> Bm25Index {
        let docs: Vec<ToolDocument> = (0..50)
            .map(|i| ToolDocument {
                name: format!("tool_{i}_fetch"),
                description: format!("Fetches item number {i} from the store"),
                param_text: "item id".into(),
                server: format!("srv{}", i % 3),
            })
            .collect();
        Bm25Index::build(&docs, Bm25Params::default()).unwrap()
    }

    #[test]
    fn round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bm25.idx");
        let original = index();
        original.save(&path).unwrap();
        let loaded = Bm25Index::load(&path).unwrap();
        assert_eq!(loaded.params(), original.params());
        for query in ["fetch item 7", "store", "srv1 tool", "nothing here"] {
            assert_eq!(loaded.scores(query), original.scores(query));
        }
        assert_eq!(loaded.rows_named("srv1/tool_4_fetch"), [4]);
        assert_eq!(loaded.name_has_term("srv2").unwrap(), original.name_has_term("srv2").unwrap());
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1, "temporary file left behind");
    }

    #[test]
    fn every_truncation_and_bit_flip_is_a_format_error() {
        let bytes = index().to_bytes();
        for len in (0..bytes.len()).step_by(7) {
            assert!(Bm25Index::from_bytes(&bytes[..len]).is_err(), "truncated to {len}");
        }
        for at in (0..bytes.len()).step_by(13) {
            let mut corrupted = bytes.clone();
            corrupted[at] ^= 0x10;
            if (12..16).contains(&at) || (28..32).contains(&at) {
                continue; // reserved header bytes carry no meaning
            }
            assert!(Bm25Index::from_bytes(&corrupted).is_err(), "bit flipped at {at}");
        }
    }

    #[test]
    fn consistent_checksum_does_not_hide_bad_structure() {
        let bytes = index().to_bytes();
        let mut payload = bytes[HEADER_LEN..].to_vec();
        // The first name's blob length: make it claim more bytes than there are.
        payload[24..32].copy_from_slice(&u64::MAX.to_le_bytes());
        let mut forged = bytes[..HEADER_LEN].to_vec();
        forged[24..28].copy_from_slice(&crc32fast::hash(&payload).to_le_bytes());
        forged.extend_from_slice(&payload);
        let err = Bm25Index::from_bytes(&forged).unwrap_err();
        assert!(err.contains("tool names"), "{err}");
    }
}
