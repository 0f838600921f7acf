//! Tokens for TCP connections to `tessera serve`: read from a file only its owner can read (as ssh
//! treats private keys), of a minimum strength, compared in constant time; a missing token file is
//! created with a fresh random token.
//!
//! Unix-socket connections need no token: the socket is made accessible to its owner only, and the
//! server checks the peer's user id (`SO_PEERCRED`).

use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

use crate::error::{Error, Result};

/// Fewest characters a token may have.
pub const MIN_TOKEN_CHARS: usize = 16;
/// Fewest distinct characters (rules out `aaaaaaaaaaaaaaaa` and short repeated patterns).
const MIN_DISTINCT_CHARS: usize = 8;
/// Random bytes in a generated token (hex-encoded: 64 characters).
const GENERATED_BYTES: usize = 32;

/// A token that passed the strength rules.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(String);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(…)")
    }
}

impl Token {
    /// Checks a token's strength; `origin` names where it came from in the error.
    pub fn parse(text: &str, origin: &str) -> Result<Token> {
        let t = text.trim();
        let chars = t.chars().count();
        let mut distinct: Vec<char> = t.chars().collect();
        distinct.sort_unstable();
        distinct.dedup();
        if chars < MIN_TOKEN_CHARS || distinct.len() < MIN_DISTINCT_CHARS {
            return Err(Error::config(
                "token",
                format!(
                    "too weak ({chars} characters, {} distinct; at least {MIN_TOKEN_CHARS} and \
                     {MIN_DISTINCT_CHARS} are needed — delete the file and tessera serve writes a \
                     random one): {origin}",
                    distinct.len()
                ),
            ));
        }
        Ok(Token(t.to_string()))
    }

    /// A fresh random token (hex of 32 bytes from the operating system).
    pub fn generate() -> Result<Token> {
        let mut bytes = [0u8; GENERATED_BYTES];
        std::fs::File::open("/dev/urandom")
            .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes))
            .map_err(|e| Error::io("reading random bytes", "/dev/urandom", e))?;
        Ok(Token(bytes.iter().map(|b| format!("{b:02x}")).collect()))
    }

    /// Reads a token file, refusing one that others can read or write, or that another user owns.
    pub fn from_file(path: &Path) -> Result<Token> {
        use std::io::Read;
        use std::os::unix::fs::OpenOptionsExt;
        // Opened without blocking (a FIFO would wait for a writer forever) and checked on the
        // open file: a regular file of at most MAX_TOKEN_FILE_BYTES (not a 4 GB sparse one).
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
            .map_err(|e| Error::io("reading token file", path, e))?;
        let meta = file
            .metadata()
            .map_err(|e| Error::io("reading token file", path, e))?;
        if !meta.is_file() {
            return Err(Error::format(path, "the token file is not a regular file"));
        }
        if meta.len() > MAX_TOKEN_FILE_BYTES {
            return Err(Error::format(
                path,
                format!(
                    "the token file holds {} bytes; a token file holds one line of at most \
                     {MAX_TOKEN_FILE_BYTES}",
                    meta.len()
                ),
            ));
        }
        check_private(path, &meta)?;
        let mut text = String::new();
        file.take(MAX_TOKEN_FILE_BYTES)
            .read_to_string(&mut text)
            .map_err(|e| Error::io("reading token file", path, e))?;
        Token::parse(&text, &path.display().to_string())
    }

    /// [`Token::from_file`], or when the file does not exist, a new random token written to it
    /// (mode 0600). The flag says whether it was created.
    pub fn load_or_create(path: &Path) -> Result<(Token, bool)> {
        if path.exists() {
            return Ok((Token::from_file(path)?, false));
        }
        let token = Token::generate()?;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(|e| Error::io("creating token file", path, e))?;
        writeln!(f, "{}", token.0).map_err(|e| Error::io("writing token file", path, e))?;
        Ok((token, true))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Compares with a token a client sent, in time that depends only on the lengths.
    pub fn matches(&self, given: &str) -> bool {
        let (a, b) = (given.as_bytes(), self.0.as_bytes());
        if a.len() != b.len() {
            return false;
        }
        let diff = a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y));
        std::hint::black_box(diff) == 0
    }
}

/// Largest token file read, in bytes.
const MAX_TOKEN_FILE_BYTES: u64 = 4096;

/// Refuses a secret file that is not owned by this user or that group or others may access.
fn check_private(path: &Path, meta: &std::fs::Metadata) -> Result<()> {
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me {
        return Err(Error::format(
            path,
            format!(
                "the token file belongs to user id {}, not to this user ({me})",
                meta.uid()
            ),
        ));
    }
    let mode = meta.mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(Error::format(
            path,
            format!(
                "permissions {mode:04o} on the token file are too open: others could read the \
                 token (run `chmod 600` on it)"
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn weak_tokens_are_refused_and_strong_ones_match_exactly() {
        for weak in [
            "x",
            "s3cret",
            "aaaaaaaaaaaaaaaaaaaa",
            "abababababababababab",
        ] {
            let err = Token::parse(weak, "test").unwrap_err().to_string();
            assert!(err.contains("too weak"), "{weak}: {err}");
        }
        let t = Token::parse("  correct horse battery staple\n", "test").unwrap();
        assert!(t.matches("correct horse battery staple"));
        assert!(!t.matches("correct horse battery stapl"));
        assert!(!t.matches("correct horse battery staplf"));
        let g = Token::generate().unwrap();
        assert_eq!(g.as_str().len(), 2 * GENERATED_BYTES);
        assert_ne!(g, Token::generate().unwrap());
        assert!(
            !format!("{g:?}").contains(g.as_str()),
            "Debug must not print the token"
        );
    }

    #[test]
    fn token_files_readable_by_others_are_refused_and_missing_ones_created_private() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        let (made, created) = Token::load_or_create(&path).unwrap();
        assert!(created);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let (again, created) = Token::load_or_create(&path).unwrap();
        assert!(!created);
        assert_eq!(again, made);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = Token::from_file(&path).unwrap_err().to_string();
        assert!(err.contains("0644") && err.contains("too open"), "{err}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
        assert!(Token::from_file(&path).is_err());
    }

    #[test]
    fn a_fifo_or_an_oversized_token_file_is_refused_without_waiting_or_reading_it() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo on a NUL-terminated path in a fresh folder.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = Token::from_file(&fifo).unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "{e}");
        let sparse = dir.path().join("sparse");
        let f = std::fs::File::create(&sparse).unwrap();
        f.set_len(4 << 30).unwrap();
        std::fs::set_permissions(&sparse, std::fs::Permissions::from_mode(0o600)).unwrap();
        let e = Token::from_file(&sparse).unwrap_err().to_string();
        assert!(e.contains("4294967296 bytes"), "{e}");
    }
}
