#![forbid(unsafe_code)]
//! The protobuf wire format, as far as the Perfetto trace needs it: a writer of varint, fixed64
//! and length-delimited fields, and a reader of the same for tests and tools that check a
//! written trace. Field numbers and types follow Perfetto's `perfetto_trace.proto`; the Python
//! test suite checks the output against the `perfetto` package's generated classes.

/// Appends protobuf fields to a buffer.
#[derive(Debug, Default)]
pub struct Message {
    buf: Vec<u8>,
}

const VARINT: u8 = 0;
const FIXED64: u8 = 1;
const LEN: u8 = 2;
const FIXED32: u8 = 5;

/// `v` as a base-128 varint.
pub fn put_varint(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push((v as u8) | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

impl Message {
    pub fn new() -> Message {
        Message::default()
    }

    pub fn bytes(&self) -> &[u8] {
        &self.buf
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    pub fn clear(&mut self) {
        self.buf.clear();
    }

    fn key(&mut self, field: u32, wire_type: u8) {
        put_varint(&mut self.buf, u64::from(field) << 3 | u64::from(wire_type));
    }

    /// A `uint32`/`uint64`/`enum` field (also `int32` of a non-negative value).
    pub fn uint(&mut self, field: u32, v: u64) {
        self.key(field, VARINT);
        put_varint(&mut self.buf, v);
    }

    /// An `int64` field (two's complement, not zigzag).
    pub fn int(&mut self, field: u32, v: i64) {
        self.uint(field, v as u64);
    }

    pub fn bool(&mut self, field: u32, v: bool) {
        self.uint(field, u64::from(v));
    }

    pub fn fixed64(&mut self, field: u32, v: u64) {
        self.key(field, FIXED64);
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    /// A `string` or `bytes` field, or an already encoded message.
    pub fn len_delimited(&mut self, field: u32, v: &[u8]) {
        self.len_header(field, v.len());
        self.buf.extend_from_slice(v);
    }

    /// The key and length of a length-delimited field whose `len` bytes follow this buffer
    /// (the caller writes them next, from elsewhere).
    pub fn len_header(&mut self, field: u32, len: usize) {
        self.key(field, LEN);
        put_varint(&mut self.buf, len as u64);
    }

    pub fn str(&mut self, field: u32, v: &str) {
        self.len_delimited(field, v.as_bytes());
    }

    /// A nested message written by `fill`: its bytes go straight into this buffer behind a
    /// one-byte length, widened afterwards in the rare case it is 128 bytes or more.
    pub fn nested(&mut self, field: u32, fill: impl FnOnce(&mut Message)) {
        self.key(field, LEN);
        let at = self.buf.len();
        self.buf.push(0);
        fill(self);
        let len = self.buf.len() - at - 1;
        if len < 0x80 {
            self.buf[at] = len as u8;
        } else {
            let mut prefix = Vec::with_capacity(10);
            put_varint(&mut prefix, len as u64);
            self.buf.splice(at..=at, prefix);
        }
    }
}

/// One field's value as read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Value<'a> {
    Varint(u64),
    Fixed64(u64),
    Fixed32(u32),
    Bytes(&'a [u8]),
}

impl<'a> Value<'a> {
    pub fn as_u64(self) -> Option<u64> {
        match self {
            Value::Varint(v) | Value::Fixed64(v) => Some(v),
            Value::Fixed32(v) => Some(u64::from(v)),
            Value::Bytes(_) => None,
        }
    }

    pub fn as_bytes(self) -> Option<&'a [u8]> {
        match self {
            Value::Bytes(b) => Some(b),
            _ => None,
        }
    }

    pub fn as_str(self) -> Option<&'a str> {
        std::str::from_utf8(self.as_bytes()?).ok()
    }
}

/// The fields of one message, in order; an error ends the iteration (truncated input, a
/// varint over 10 bytes, an unknown wire type).
#[derive(Debug, Clone)]
pub struct Fields<'a> {
    rest: &'a [u8],
}

/// The fields of the message `buf`.
pub fn fields(buf: &[u8]) -> Fields<'_> {
    Fields { rest: buf }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed protobuf: {0}")]
pub struct DecodeError(&'static str);

fn take_varint(rest: &mut &[u8]) -> Result<u64, DecodeError> {
    let mut v = 0u64;
    for i in 0..10 {
        let (&b, tail) = rest.split_first().ok_or(DecodeError("truncated varint"))?;
        *rest = tail;
        v |= u64::from(b & 0x7f) << (7 * i);
        if b < 0x80 {
            return Ok(v);
        }
    }
    Err(DecodeError("varint longer than 10 bytes"))
}

fn take<'a>(rest: &mut &'a [u8], n: usize) -> Result<&'a [u8], DecodeError> {
    if rest.len() < n {
        return Err(DecodeError("truncated field"));
    }
    let (head, tail) = rest.split_at(n);
    *rest = tail;
    Ok(head)
}

impl<'a> Fields<'a> {
    fn read(&mut self) -> Result<(u32, Value<'a>), DecodeError> {
        let key = take_varint(&mut self.rest)?;
        let field = u32::try_from(key >> 3).map_err(|_| DecodeError("field number too large"))?;
        let value = match (key & 7) as u8 {
            VARINT => Value::Varint(take_varint(&mut self.rest)?),
            FIXED64 => Value::Fixed64(u64::from_le_bytes(
                take(&mut self.rest, 8)?.try_into().expect("8 bytes"),
            )),
            FIXED32 => Value::Fixed32(u32::from_le_bytes(
                take(&mut self.rest, 4)?.try_into().expect("4 bytes"),
            )),
            LEN => {
                let n = take_varint(&mut self.rest)?;
                let n = usize::try_from(n).map_err(|_| DecodeError("length too large"))?;
                Value::Bytes(take(&mut self.rest, n)?)
            }
            _ => return Err(DecodeError("unsupported wire type")),
        };
        Ok((field, value))
    }
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<(u32, Value<'a>), DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let item = self.read();
        if item.is_err() {
            self.rest = &[];
        }
        Some(item)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip_at_every_length() {
        for v in [
            0u64,
            1,
            127,
            128,
            300,
            16_383,
            16_384,
            u32::MAX as u64,
            u64::MAX,
        ] {
            let mut m = Message::new();
            m.uint(1, v);
            let got: Vec<_> = fields(m.bytes()).collect::<Result<_, _>>().unwrap();
            assert_eq!(got, vec![(1, Value::Varint(v))]);
        }
        // The protobuf documentation's example: field 1 = 150 is 08 96 01.
        let mut m = Message::new();
        m.uint(1, 150);
        assert_eq!(m.bytes(), [0x08, 0x96, 0x01]);
        let mut m = Message::new();
        m.int(1, -1);
        assert_eq!(m.bytes().len(), 11, "negative int64 takes ten varint bytes");
    }

    #[test]
    fn nested_messages_get_their_length_in_front() {
        let mut m = Message::new();
        m.nested(3, |inner| {
            inner.str(2, "testing");
            inner.nested(4, |deep| deep.fixed64(5, 7));
        });
        // Longer than 127 bytes: a two-byte length.
        let long = "x".repeat(200);
        m.nested(6, |inner| inner.str(1, &long));
        let top: Vec<_> = fields(m.bytes()).collect::<Result<_, _>>().unwrap();
        assert_eq!(top.len(), 2);
        let inner: Vec<_> = fields(top[0].1.as_bytes().unwrap())
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(inner[0], (2, Value::Bytes(b"testing")));
        let deep: Vec<_> = fields(inner[1].1.as_bytes().unwrap())
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(deep, vec![(5, Value::Fixed64(7))]);
        let second: Vec<_> = fields(top[1].1.as_bytes().unwrap())
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(second[0].1.as_str(), Some(long.as_str()));
    }

    #[test]
    fn truncated_input_is_an_error_not_a_panic() {
        let mut m = Message::new();
        m.str(1, "hello");
        for cut in 0..m.bytes().len() {
            let r: Result<Vec<_>, _> = fields(&m.bytes()[..cut]).collect();
            assert_eq!(r.is_err(), cut > 0, "cut at {cut}");
        }
        assert!(fields(&[0x0b]).next().unwrap().is_err(), "wire type 3");
    }
}
