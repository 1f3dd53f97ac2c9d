//! The echo's picture (`agent-bridge --echo --file`), a PNG made here so the echo needs no
//! image crate. It holds only what a valid PNG needs: RGB pixels in zlib "stored" deflate
//! blocks (no compression: the picture is 3 kB either way), a CRC-32 per chunk and the
//! Adler-32 of the pixels.

use std::sync::LazyLock;

const SIGNATURE: [u8; 8] = [0x89, b'P', b'N', b'G', b'\r', b'\n', 0x1a, b'\n'];
/// A stored deflate block's length is a 16-bit field.
const MAX_STORED_BLOCK: usize = 0xffff;
const ECHO_SIDE: u32 = 32;

/// 32×32 concentric rings, an echo spreading out; drawn on first use.
pub static ECHO_PNG: LazyLock<Vec<u8>> =
    LazyLock::new(|| encode_rgb(ECHO_SIDE, ECHO_SIDE, &rings(ECHO_SIDE)));

fn rings(side: u32) -> Vec<u8> {
    let centre = (side as f64 - 1.0) / 2.0;
    let mut rgb = Vec::with_capacity((side * side * 3) as usize);
    for y in 0..side {
        for x in 0..side {
            let distance = (x as f64 - centre).hypot(y as f64 - centre);
            let pixel = match (distance as u32 / 3) % 2 {
                0 => [0x1f, 0x8a, 0x9e],
                _ => [0xe8, 0xf6, 0xf8],
            };
            rgb.extend_from_slice(&pixel);
        }
    }
    rgb
}

/// A PNG of `rgb`, `width × height` pixels of three bytes each, row by row.
pub fn encode_rgb(width: u32, height: u32, rgb: &[u8]) -> Vec<u8> {
    debug_assert_eq!(rgb.len(), (width * height * 3) as usize);
    let mut header = Vec::with_capacity(13);
    header.extend_from_slice(&width.to_be_bytes());
    header.extend_from_slice(&height.to_be_bytes());
    // 8 bits per sample, colour type 2 (RGB), deflate, adaptive filtering, no interlace.
    header.extend_from_slice(&[8, 2, 0, 0, 0]);
    let mut png = SIGNATURE.to_vec();
    chunk(&mut png, b"IHDR", &header);
    chunk(&mut png, b"IDAT", &zlib_stored(&scanlines(width, rgb)));
    chunk(&mut png, b"IEND", &[]);
    png
}

/// Each row starts with its filter type: 0, none.
fn scanlines(width: u32, rgb: &[u8]) -> Vec<u8> {
    let row = (width * 3) as usize;
    let mut out = Vec::with_capacity(rgb.len() + rgb.len() / row.max(1));
    for pixels in rgb.chunks(row.max(1)) {
        out.push(0);
        out.extend_from_slice(pixels);
    }
    out
}

/// Length, type, data, and the CRC of type and data.
fn chunk(png: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    png.extend_from_slice(&(data.len() as u32).to_be_bytes());
    let start = png.len();
    png.extend_from_slice(kind);
    png.extend_from_slice(data);
    let crc = crc32(&png[start..]);
    png.extend_from_slice(&crc.to_be_bytes());
}

/// A zlib stream of stored blocks: header 0x78 0x01 (deflate, 32 KiB window, no dictionary;
/// 0x7801 is a multiple of 31 as RFC 1950 asks), then per block BFINAL/BTYPE 00, LEN and its
/// one's complement NLEN (little-endian), the bytes; the Adler-32 last, big-endian.
fn zlib_stored(data: &[u8]) -> Vec<u8> {
    let blocks = data.len().div_ceil(MAX_STORED_BLOCK).max(1);
    let mut out = Vec::with_capacity(data.len() + 5 * blocks + 6);
    out.extend_from_slice(&[0x78, 0x01]);
    for index in 0..blocks {
        let start = index * MAX_STORED_BLOCK;
        let block = &data[start..data.len().min(start + MAX_STORED_BLOCK)];
        out.push(u8::from(index + 1 == blocks));
        let len = block.len() as u16;
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&(!len).to_le_bytes());
        out.extend_from_slice(block);
    }
    out.extend_from_slice(&adler32(data).to_be_bytes());
    out
}

/// CRC-32 as PNG and zlib define it (reflected, polynomial 0xEDB88320), a bit at a time:
/// the picture is drawn once, so no table.
pub fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for byte in bytes {
        crc ^= u32::from(*byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xedb8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

fn adler32(bytes: &[u8]) -> u32 {
    const MOD: u32 = 65_521;
    let (mut a, mut b) = (1u32, 0u32);
    for byte in bytes {
        a = (a + u32::from(*byte)) % MOD;
        b = (b + a) % MOD;
    }
    (b << 16) | a
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The chunks of `png` after its signature: (type, data, stored CRC).
    fn chunks(png: &[u8]) -> Vec<(String, Vec<u8>, u32)> {
        let mut rest = &png[8..];
        let mut found = Vec::new();
        while !rest.is_empty() {
            let len = u32::from_be_bytes(rest[..4].try_into().unwrap()) as usize;
            let kind = String::from_utf8(rest[4..8].to_vec()).unwrap();
            let data = rest[8..8 + len].to_vec();
            let crc = u32::from_be_bytes(rest[8 + len..12 + len].try_into().unwrap());
            found.push((kind, data, crc));
            rest = &rest[12 + len..];
        }
        found
    }

    /// The bytes of a zlib stream of stored blocks, its Adler-32 checked.
    fn inflate_stored(zlib: &[u8]) -> Vec<u8> {
        assert_eq!(u16::from_be_bytes([zlib[0], zlib[1]]) % 31, 0, "FCHECK");
        let mut at = 2;
        let mut out = Vec::new();
        loop {
            let last = zlib[at] & 1 == 1;
            assert_eq!(zlib[at] >> 1, 0, "a stored block");
            let len = u16::from_le_bytes([zlib[at + 1], zlib[at + 2]]);
            let nlen = u16::from_le_bytes([zlib[at + 3], zlib[at + 4]]);
            assert_eq!(len, !nlen);
            out.extend_from_slice(&zlib[at + 5..at + 5 + len as usize]);
            at += 5 + len as usize;
            if last {
                break;
            }
        }
        assert_eq!(zlib[at..], adler32(&out).to_be_bytes());
        out
    }

    #[test]
    fn the_checksums_match_their_published_check_values() {
        assert_eq!(crc32(b"123456789"), 0xcbf4_3926);
        assert_eq!(crc32(b"IEND"), 0xae42_6082, "every PNG ends with these bytes");
        assert_eq!(adler32(b"Wikipedia"), 0x11e6_0398);
    }

    #[test]
    fn the_echo_picture_is_a_valid_png_with_ihdr_idat_and_iend_and_right_crcs() {
        let png = &*ECHO_PNG;
        assert_eq!(png[..8], SIGNATURE);
        let chunks = chunks(png);
        let kinds: Vec<&str> = chunks.iter().map(|(kind, _, _)| kind.as_str()).collect();
        assert_eq!(kinds, ["IHDR", "IDAT", "IEND"]);
        for (kind, data, crc) in &chunks {
            let covered = [kind.as_bytes(), data].concat();
            assert_eq!(crc32(&covered), *crc, "the CRC of {kind}");
        }
        let header = &chunks[0].1;
        assert_eq!(header[..8], [0, 0, 0, 32, 0, 0, 0, 32], "32×32");
        assert_eq!(header[8..], [8, 2, 0, 0, 0], "8-bit RGB, no interlace");
        let pixels = inflate_stored(&chunks[1].1);
        assert_eq!(
            pixels.len(),
            32 * (1 + 32 * 3),
            "a filter byte and 32 pixels a row"
        );
        assert!(pixels.chunks(97).all(|row| row[0] == 0), "filter type none");
        assert!(chunks[2].1.is_empty());
        assert_eq!(png[png.len() - 4..], [0xae, 0x42, 0x60, 0x82]);
    }

    #[test]
    fn pixels_beyond_one_stored_block_are_split_across_blocks() {
        let rgb = vec![7u8; 200 * 200 * 3];
        let png = encode_rgb(200, 200, &rgb);
        let idat = &chunks(&png)[1].1;
        let pixels = inflate_stored(idat);
        assert_eq!(pixels.len(), 200 * (1 + 600));
        assert!(pixels.len() > MAX_STORED_BLOCK, "more than one block was needed");
    }
}
