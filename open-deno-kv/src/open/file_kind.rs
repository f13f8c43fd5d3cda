//! What a file really is, read from its first bytes before any engine touches it, so that a
//! redb file given as a plain path, an SQLite file given as `redb:`, or a text file given as a
//! database is named and refused (left exactly as it was) instead of failing deep in an engine
//! with "file is not a database".

use std::fmt;
use std::io::{ErrorKind, Read};
use std::path::Path;

/// The first bytes of every SQLite 3 database file.
const SQLITE_MAGIC: &[u8] = b"SQLite format 3\0";
/// The first bytes of every redb database file.
const REDB_MAGIC: &[u8] = &[b'r', b'e', b'd', b'b', 0x1A, 0x0A, 0xA9, 0x0D, 0x0A];

/// The kind of file at a path, judged from its header alone (the file is opened for reading,
/// and at most 16 bytes are read). Whether an SQLite file holds Deno's tables or another
/// application's is the SQLite engine's own check when it opens the file, which refuses a
/// foreign one without writing to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// Nothing at the path: an engine will create its file there.
    Missing,
    /// An empty file: an engine will start a new database in it.
    Empty,
    /// An SQLite database (Deno's own file format is one).
    Sqlite,
    /// A redb database.
    Redb,
    /// A directory, not a file.
    Directory,
    /// A file that is neither an SQLite nor a redb database (text, another format, damage).
    Other,
}

impl FileKind {
    /// Reads the kind of the file at `path`. An error only when the file exists but cannot be
    /// read (permissions, I/O).
    pub fn of(path: &Path) -> std::io::Result<FileKind> {
        let meta = match std::fs::metadata(path) {
            Ok(meta) => meta,
            Err(err) if err.kind() == ErrorKind::NotFound => return Ok(FileKind::Missing),
            Err(err) => return Err(err),
        };
        if meta.is_dir() {
            return Ok(FileKind::Directory);
        }
        if meta.len() == 0 {
            return Ok(FileKind::Empty);
        }
        let mut header = Vec::with_capacity(SQLITE_MAGIC.len());
        std::fs::File::open(path)?
            .take(SQLITE_MAGIC.len() as u64)
            .read_to_end(&mut header)?;
        Ok(if header.starts_with(SQLITE_MAGIC) {
            FileKind::Sqlite
        } else if header.starts_with(REDB_MAGIC) {
            FileKind::Redb
        } else {
            FileKind::Other
        })
    }

    /// Whether an engine would start a new database here (nothing there, or an empty file).
    pub fn is_new(self) -> bool {
        matches!(self, FileKind::Missing | FileKind::Empty)
    }
}

impl fmt::Display for FileKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FileKind::Missing => "missing",
            FileKind::Empty => "an empty file",
            FileKind::Sqlite => "an SQLite file",
            FileKind::Redb => "a redb file",
            FileKind::Directory => "a directory",
            FileKind::Other => "not a database (neither SQLite nor redb)",
        })
    }
}

/// Why the file at `path` cannot be opened with `scheme` (`sqlite` or `redb`), with the URL to
/// use instead; `None` when the kind fits. `plain`: the path was given without a scheme (which
/// means `sqlite:`), where a new file named `*.redb` is refused too, since it would quietly
/// become an SQLite file with a redb name.
pub(crate) fn refusal(path: &Path, scheme: &str, plain: bool) -> Option<String> {
    let shown = path.display();
    let kind = match FileKind::of(path) {
        Ok(kind) => kind,
        // Unreadable: the engine's own open reports it with its cause.
        Err(_) => return None,
    };
    match (kind, scheme) {
        (FileKind::Redb, "sqlite") => {
            Some(format!("{shown} is a redb file: open it as redb:{shown}"))
        }
        (FileKind::Sqlite, "redb") => Some(format!(
            "{shown} is an SQLite file: open it as sqlite:{shown}"
        )),
        (FileKind::Directory, _) => Some(format!(
            "{shown} is a directory: name a database file in it, e.g. {scheme}:{}",
            path.join(if scheme == "redb" {
                "kv.redb"
            } else {
                "kv.sqlite3"
            })
            .display()
        )),
        (FileKind::Other, _) => Some(format!(
            "{shown} is not a database (neither SQLite nor redb), so it was left untouched: \
             check the path, or name a path that does not exist yet to create a database"
        )),
        (kind, "sqlite")
            if plain && kind.is_new() && path.extension().is_some_and(|ext| ext == "redb") =>
        {
            Some(format!(
                "a plain path means an SQLite file, and {shown} does not hold one yet: \
                 use redb:{shown} for a redb file, or sqlite:{shown} for an SQLite one"
            ))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_name_the_kind() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, bytes: &[u8]| {
            let path = dir.path().join(name);
            std::fs::write(&path, bytes).unwrap();
            path
        };
        assert_eq!(
            FileKind::of(&dir.path().join("none")).unwrap(),
            FileKind::Missing
        );
        assert_eq!(FileKind::of(dir.path()).unwrap(), FileKind::Directory);
        assert_eq!(FileKind::of(&write("e", b"")).unwrap(), FileKind::Empty);
        assert_eq!(
            FileKind::of(&write("t", b"hello\n")).unwrap(),
            FileKind::Other
        );
        let mut sqlite = SQLITE_MAGIC.to_vec();
        sqlite.extend([0u8; 100]);
        assert_eq!(
            FileKind::of(&write("s", &sqlite)).unwrap(),
            FileKind::Sqlite
        );
        // A prefix of the header is not the header.
        assert_eq!(
            FileKind::of(&write("p", b"SQLite")).unwrap(),
            FileKind::Other
        );
        let mut redb = REDB_MAGIC.to_vec();
        redb.extend([0u8; 100]);
        assert_eq!(FileKind::of(&write("r", &redb)).unwrap(), FileKind::Redb);
    }

    #[test]
    fn refusals_name_the_url_to_use() {
        let dir = tempfile::tempdir().unwrap();
        let new_redb = dir.path().join("kv.redb");
        let refused = refusal(&new_redb, "sqlite", true).unwrap_or_default();
        assert!(
            refused.contains("use redb:") && refused.contains("or sqlite:"),
            "{refused}"
        );
        // With a scheme, the name is the caller's choice.
        assert_eq!(refusal(&new_redb, "sqlite", false), None);
        assert_eq!(refusal(&new_redb, "redb", false), None);
        assert_eq!(
            refusal(&dir.path().join("kv.sqlite3"), "sqlite", true),
            None
        );
        let directory = refusal(dir.path(), "redb", false).unwrap_or_default();
        let inside = dir.path().join("kv.redb");
        assert!(
            directory.contains("is a directory: name a database file in it, e.g. redb:")
                && directory.contains(&inside.display().to_string()),
            "{directory}"
        );
    }
}
