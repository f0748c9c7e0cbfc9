//! HTTP/1.1 as the API server speaks it: one request at a time on a kept
//! connection, answers framed by Content-Length or chunked.

use std::io::{self, BufRead, Read, Write};

/// The most bytes of one answer's body: far above any list this crate
/// makes, and a bound on what a broken server can make a call hold.
const MAX_BODY_BYTES: usize = 64 * 1024 * 1024;
/// The most bytes of the status line and headers.
const MAX_HEAD_BYTES: usize = 64 * 1024;

pub(super) struct Request<'a> {
    pub method: &'static str,
    pub path: &'a str,
    pub host: &'a str,
    pub token: Option<&'a str>,
    pub body: Option<&'a [u8]>,
}

impl Request<'_> {
    /// One buffer, written at once: a single TLS record for small requests.
    pub(super) fn write_to(&self, out: &mut impl Write) -> io::Result<()> {
        let mut head = format!(
            "{} {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: ipam-ds-cluster/{}\r\nAccept: application/json\r\n",
            self.method,
            self.path,
            self.host,
            env!("CARGO_PKG_VERSION")
        );
        if let Some(token) = self.token {
            head.push_str(&format!("Authorization: Bearer {token}\r\n"));
        }
        let body = self.body.unwrap_or_default();
        if self.body.is_some() {
            head.push_str(&format!("Content-Type: application/json\r\nContent-Length: {}\r\n", body.len()));
        }
        head.push_str("\r\n");
        let mut bytes = head.into_bytes();
        bytes.extend_from_slice(body);
        out.write_all(&bytes)?;
        out.flush()
    }
}

pub(super) struct Response {
    pub status: u16,
    /// The `Date` header, as sent.
    pub date: Option<String>,
    pub body: Vec<u8>,
    /// The server closes the connection after this answer.
    pub closes: bool,
}

fn invalid(message: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message.into())
}

pub(super) fn read_response(input: &mut impl BufRead) -> io::Result<Response> {
    let status_line = line(input)?;
    let status = status_line
        .strip_prefix("HTTP/1.1 ")
        .or_else(|| status_line.strip_prefix("HTTP/1.0 "))
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse::<u16>().ok())
        .ok_or_else(|| invalid(format!("not an HTTP/1.1 status line: {status_line:?}")))?;
    let (mut length, mut chunked, mut date, mut closes) = (None, false, None, status_line.starts_with("HTTP/1.0"));
    let mut head_bytes = status_line.len();
    loop {
        let header = line(input)?;
        if header.is_empty() {
            break;
        }
        head_bytes += header.len();
        if head_bytes > MAX_HEAD_BYTES {
            return Err(invalid(format!("headers longer than {MAX_HEAD_BYTES} bytes")));
        }
        let Some((name, value)) = header.split_once(':') else {
            return Err(invalid(format!("not a header: {header:?}")));
        };
        let value = value.trim();
        match name.to_ascii_lowercase().as_str() {
            "content-length" => {
                length = Some(value.parse::<usize>().map_err(|_| invalid(format!("Content-Length {value:?}")))?)
            }
            "transfer-encoding" => chunked = value.eq_ignore_ascii_case("chunked"),
            "date" => date = Some(value.to_string()),
            "connection" => closes = value.eq_ignore_ascii_case("close"),
            _ => {}
        }
    }
    let body = if chunked {
        read_chunked(input)?
    } else if let Some(length) = length {
        if length > MAX_BODY_BYTES {
            return Err(invalid(format!("a body of {length} bytes, more than the {MAX_BODY_BYTES} read")));
        }
        let mut body = vec![0; length];
        input.read_exact(&mut body)?;
        body
    } else if status == 204 || status == 304 {
        Vec::new()
    } else {
        // Framed by the end of the connection.
        closes = true;
        let mut body = Vec::new();
        input.take(MAX_BODY_BYTES as u64 + 1).read_to_end(&mut body)?;
        body
    };
    if body.len() > MAX_BODY_BYTES {
        return Err(invalid(format!("a body of more than the {MAX_BODY_BYTES} bytes read")));
    }
    Ok(Response { status, date, body, closes })
}

fn read_chunked(input: &mut impl BufRead) -> io::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let size_line = line(input)?;
        let size = size_line.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size, 16).map_err(|_| invalid(format!("a chunk size {size_line:?}")))?;
        if size == 0 {
            // Trailers, up to the empty line.
            while !line(input)?.is_empty() {}
            return Ok(body);
        }
        if size > MAX_BODY_BYTES - body.len() {
            return Err(invalid(format!("a body of more than the {MAX_BODY_BYTES} bytes read")));
        }
        let start = body.len();
        body.resize(start + size, 0);
        input.read_exact(&mut body[start..])?;
        if !line(input)?.is_empty() {
            return Err(invalid("a chunk longer than its size"));
        }
    }
}

/// One line without its CRLF; the end of the stream before it is an error.
fn line(input: &mut impl BufRead) -> io::Result<String> {
    let mut bytes = Vec::new();
    input.take(MAX_HEAD_BYTES as u64).read_until(b'\n', &mut bytes)?;
    if bytes.last() != Some(&b'\n') {
        return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the connection ended within an answer"));
    }
    bytes.pop();
    if bytes.last() == Some(&b'\r') {
        bytes.pop();
    }
    String::from_utf8(bytes).map_err(|_| invalid("a header that is not UTF-8"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chunked_answer_is_joined_and_its_date_kept() {
        let raw = b"HTTP/1.1 200 OK\r\nDate: Sat, 28 Nov 2026 12:00:00 GMT\r\nTransfer-Encoding: chunked\r\n\r\n\
                    3\r\n{\"a\r\n4;x=y\r\n\":1}\r\n0\r\n\r\n";
        let r = read_response(&mut &raw[..]).unwrap();
        assert_eq!(
            (r.status, r.date.as_deref(), r.body.as_slice(), r.closes),
            (200, Some("Sat, 28 Nov 2026 12:00:00 GMT"), &b"{\"a\":1}"[..], false)
        );
    }

    #[test]
    fn a_sized_answer_is_read_to_its_length_and_no_further() {
        let raw = b"HTTP/1.1 409 Conflict\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}next";
        let r = read_response(&mut &raw[..]).unwrap();
        assert_eq!((r.status, r.body.as_slice(), r.closes), (409, &b"{}"[..], true));
    }

    #[test]
    fn a_cut_answer_is_an_error() {
        let raw = b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{}";
        assert!(read_response(&mut &raw[..]).is_err());
        assert!(read_response(&mut &b"HTTP/1.1 200 OK\r\nDate"[..]).is_err());
        assert!(read_response(&mut &b"SSH-2.0-OpenSSH\r\n\r\n"[..]).is_err());
        let huge = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\n";
        assert!(read_response(&mut &huge[..]).is_err(), "a chunk past the limit is refused, not allocated");
    }
}
