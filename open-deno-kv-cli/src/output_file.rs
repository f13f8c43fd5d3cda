//! Where `kv dump -o PATH` writes, without ever destroying what PATH is.
//!
//! - nothing at PATH, or a regular file: the dump is written to a temporary file beside it and
//!   renamed over PATH only once complete and synced, so PATH holds either its old content or
//!   the whole dump (a replaced file keeps its permissions);
//! - a symbolic link to a regular file: the same, done to the file the link points to (the link
//!   stays a link); a link that points nowhere is refused, since where to create the file is
//!   a guess;
//! - a FIFO, a character or block device (`/dev/stdout`, `/dev/null`, a tape): written into as
//!   a stream, never renamed over or truncated, so it stays what it was. A stream cannot be
//!   all or nothing: what was written before a failure stays written;
//! - a directory: refused.
//!
//! Just before the rename, PATH is checked again: if it stopped being a regular file (or
//! nothing) meanwhile, the dump is refused rather than renamed over it.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, ErrorKind, Write};
use std::path::{Path, PathBuf};

use crate::error::CliError;

/// An open output: write through [`OutputFile::writer`], then [`OutputFile::finish`]. Dropped
/// unfinished, it removes its temporary file and leaves PATH as it was.
pub struct OutputFile {
    writer: BufWriter<File>,
    /// The path as given, for messages.
    path: PathBuf,
    /// For a replaced file: (temporary file, the file it will replace).
    replace: Option<(PathBuf, PathBuf)>,
}

impl OutputFile {
    /// Opens `path` for a dump, as the module documentation says.
    pub fn create(path: &Path) -> Result<Self, CliError> {
        let io_error = |source| CliError::Io {
            path: path.to_path_buf(),
            source,
        };
        let refuse = |reason: &str| CliError::BadOutput {
            path: path.to_path_buf(),
            reason: reason.to_owned(),
        };
        let (target, existing) = match std::fs::metadata(path) {
            Ok(meta) if meta.is_dir() => return Err(refuse("it is a directory")),
            Ok(meta) if !meta.is_file() => {
                // A FIFO or a device: written into, never replaced.
                let file = OpenOptions::new()
                    .write(true)
                    .open(path)
                    .map_err(io_error)?;
                return Ok(OutputFile {
                    writer: BufWriter::new(file),
                    path: path.to_path_buf(),
                    replace: None,
                });
            }
            Ok(meta) => {
                let is_link = std::fs::symlink_metadata(path)
                    .map_err(io_error)?
                    .file_type()
                    .is_symlink();
                let target = if is_link {
                    std::fs::canonicalize(path).map_err(io_error)?
                } else {
                    path.to_path_buf()
                };
                (target, Some(meta.permissions()))
            }
            Err(err) if err.kind() == ErrorKind::NotFound => {
                if std::fs::symlink_metadata(path).is_ok() {
                    return Err(refuse(
                        "it is a symbolic link to nothing; give the path the dump should have",
                    ));
                }
                (path.to_path_buf(), None)
            }
            Err(err) => return Err(io_error(err)),
        };
        let temp = partial_path(&target);
        let file = create_new(&temp).map_err(|source| CliError::Io {
            path: temp.clone(),
            source,
        })?;
        let output = OutputFile {
            writer: BufWriter::new(file),
            path: path.to_path_buf(),
            replace: Some((temp, target)),
        };
        if let Some(permissions) = existing {
            output
                .writer
                .get_ref()
                .set_permissions(permissions)
                .map_err(io_error)?;
        }
        Ok(output)
    }

    /// Where to write the dump.
    pub fn writer(&mut self) -> &mut impl Write {
        &mut self.writer
    }

    /// Flushes and syncs what was written, and moves a replacement into place.
    pub fn finish(mut self) -> Result<(), CliError> {
        let io_error = |source| CliError::Io {
            path: self.path.clone(),
            source,
        };
        self.writer.flush().map_err(io_error)?;
        match self.writer.get_ref().sync_all() {
            // A pipe or a character device has nothing to sync (EINVAL).
            Err(err) if self.replace.is_some() || err.kind() != ErrorKind::InvalidInput => {
                return Err(io_error(err));
            }
            _ => {}
        }
        if let Some((_, target)) = &self.replace
            && std::fs::symlink_metadata(target).is_ok_and(|meta| !meta.is_file())
        {
            // Something else took the place while the dump was written (dropping `self`
            // removes the temporary file).
            return Err(CliError::BadOutput {
                path: self.path.clone(),
                reason: "it stopped being a regular file while the dump was written; nothing \
                         was replaced"
                    .into(),
            });
        }
        if let Some((temp, target)) = self.replace.take()
            && let Err(err) = std::fs::rename(&temp, &target)
        {
            let _ = std::fs::remove_file(&temp);
            return Err(io_error(err));
        }
        Ok(())
    }
}

impl Drop for OutputFile {
    fn drop(&mut self) {
        if let Some((temp, _)) = &self.replace {
            let _ = std::fs::remove_file(temp);
        }
    }
}

/// `PATH.partial-PID`, beside PATH so that the rename stays on one file system.
fn partial_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".partial-{}", std::process::id()));
    path.with_file_name(name)
}

/// Creates `path` afresh, never opening what is there (a link someone left would be followed):
/// a stale file of a dead process with the same id is removed first.
fn create_new(path: &Path) -> std::io::Result<File> {
    let open = || OpenOptions::new().write(true).create_new(true).open(path);
    match open() {
        Err(err) if err.kind() == ErrorKind::AlreadyExists => {
            std::fs::remove_file(path)?;
            open()
        }
        other => other,
    }
}
