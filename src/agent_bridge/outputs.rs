//! What a chat completion's message carries beside its text, as the answer's `attachments`
//! (docs/agent.md#the-agent-side-agent-bridge): the `images` OpenRouter and LiteLLM add, and
//! OpenAI's `audio`. A file that cannot go (not base64, over the gateway's inline limit, a
//! sound in no format a platform plays, a type the dispatch's platform refuses) is left out
//! with a warning: the gateway refuses a whole answer for one such file, text included.

use base64::alphabet;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig, STANDARD};
use base64::engine::DecodePaddingMode;
use base64::Engine;
use serde_json::Value;

use crate::domain::Platform;
use crate::media::outgoing::{FileIn, FILES_MAX, INLINE_MAX_BYTES};

/// Servers differ in padding and alphabet; the gateway reads padded standard base64 only,
/// so every file is decoded with these and encoded again.
const LENIENT: [GeneralPurpose; 2] = [
    GeneralPurpose::new(&alphabet::STANDARD, indifferent()),
    GeneralPurpose::new(&alphabet::URL_SAFE, indifferent()),
];

const fn indifferent() -> GeneralPurposeConfig {
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent)
}

#[derive(Debug, Default, PartialEq, Eq)]
pub struct Outputs {
    pub files: Vec<FileIn>,
    /// The spoken answer's words: OpenAI sends `content: null` beside `audio`.
    pub transcript: Option<String>,
}

/// The files of `choices[0].message`, images first, at most as many as one answer takes.
pub fn of_completion(completion: &Value) -> Outputs {
    let Some(message) = completion.pointer("/choices/0/message") else {
        return Outputs::default();
    };
    let images = message.get("images").and_then(Value::as_array);
    let mut files: Vec<FileIn> = images
        .into_iter()
        .flatten()
        .enumerate()
        .filter_map(|(index, image)| image_file(index + 1, image))
        .collect();
    let audio = message.get("audio").filter(|audio| audio.is_object());
    files.extend(audio.and_then(audio_file));
    if files.len() > FILES_MAX {
        tracing::warn!(
            files = files.len(),
            "the upstream made more files than one answer takes; the first {FILES_MAX} go"
        );
        files.truncate(FILES_MAX);
    }
    let transcript = audio
        .and_then(|audio| audio.get("transcript"))
        .and_then(Value::as_str)
        .filter(|text| !text.trim().is_empty())
        .map(str::to_owned);
    Outputs { files, transcript }
}

/// The files the gateway will take for `platform` (any platform when the dispatch names
/// none), checked as it checks an answer: the file's own shape, then the platform's types
/// and sizes (WhatsApp takes JPEG and PNG images, not WebP or GIF).
pub fn fit_for(files: Vec<FileIn>, platform: Option<Platform>) -> Vec<FileIn> {
    files
        .into_iter()
        .filter(|file| match fits(file, platform) {
            Ok(()) => true,
            Err(why) => {
                let name = file.name.as_deref().unwrap_or_default();
                tracing::warn!(name, error = %why, "the platform would refuse an upstream file; left out");
                false
            }
        })
        .collect()
}

fn fits(file: &FileIn, platform: Option<Platform>) -> Result<(), String> {
    let part = file.clone().check().map_err(|e| e.0)?;
    let Some(platform) = platform else {
        return Ok(());
    };
    let limit = crate::platforms::of(platform).file_limit(&part.file.mime)?;
    match part.file.inline_len() {
        Some(len) if len > limit => Err(format!("{len} bytes, over the {limit} {platform} takes")),
        _ => Ok(()),
    }
}

/// `{"type": "image_url", "image_url": {"url": "data:image/png;base64,…"}}`; a plain
/// `http(s)` URL goes as `url`, for the gateway to fetch through its egress rules.
fn image_file(n: usize, image: &Value) -> Option<FileIn> {
    let url = image
        .pointer("/image_url/url")
        .or_else(|| image.get("image_url"))
        .and_then(Value::as_str)?;
    if let Some(data_url) = url.strip_prefix("data:") {
        return data_image(n, data_url);
    }
    if url.starts_with("https://") || url.starts_with("http://") {
        return Some(FileIn {
            url: Some(url.to_owned()),
            name: Some(name_of_url(url).unwrap_or_else(|| format!("image-{n}"))),
            ..FileIn::default()
        });
    }
    tracing::warn!("an upstream image is neither a data: URL nor an http(s) URL; left out");
    None
}

/// `image/png;base64,<data>` (the part after `data:`).
fn data_image(n: usize, data_url: &str) -> Option<FileIn> {
    let (meta, data) = data_url.split_once(',')?;
    let Some(mime) = meta.strip_suffix(";base64").map(str::trim) else {
        tracing::warn!("an upstream image's data: URL is not base64; left out");
        return None;
    };
    let bytes = decoded(data, "an image")?;
    let name = format!("image-{n}.{}", image_extension(mime));
    Some(inline(&bytes, name, mime))
}

/// `{"id", "data", "expires_at", "transcript"}`: the format is the one asked for, not
/// named in the answer, so it is read from the bytes.
fn audio_file(audio: &Value) -> Option<FileIn> {
    let data = audio.get("data").and_then(Value::as_str)?;
    let bytes = decoded(data, "audio")?;
    let Some((mime, extension)) = audio_format(&bytes) else {
        tracing::warn!(
            bytes = bytes.len(),
            "upstream audio in a format no platform plays (raw pcm16?); left out"
        );
        return None;
    };
    Some(inline(&bytes, format!("answer.{extension}"), mime))
}

fn inline(bytes: &[u8], name: String, mime: &str) -> FileIn {
    FileIn {
        data: Some(STANDARD.encode(bytes)),
        name: Some(name),
        mime: Some(mime.to_owned()),
        ..FileIn::default()
    }
}

/// The bytes of base64 `data`, when they fit the gateway's inline limit.
fn decoded(data: &str, what: &str) -> Option<Vec<u8>> {
    let compact: String = data.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    // Four characters carry three bytes: anything longer is over the limit undecoded.
    if compact.len() > INLINE_MAX_BYTES.div_ceil(3) * 4 {
        tracing::warn!(
            what,
            "an upstream file is over the {INLINE_MAX_BYTES}-byte inline limit; left out"
        );
        return None;
    }
    let Some(bytes) = LENIENT.iter().find_map(|engine| engine.decode(&compact).ok()) else {
        tracing::warn!(what, "an upstream file is not base64; left out");
        return None;
    };
    if bytes.is_empty() || bytes.len() > INLINE_MAX_BYTES {
        tracing::warn!(
            what,
            bytes = bytes.len(),
            "an upstream file is empty or over the inline limit; left out"
        );
        return None;
    }
    Some(bytes)
}

fn image_extension(mime: &str) -> &'static str {
    match mime.to_ascii_lowercase().as_str() {
        "image/png" => "png",
        "image/jpeg" | "image/jpg" => "jpg",
        "image/webp" => "webp",
        "image/gif" => "gif",
        _ => "img",
    }
}

/// By the file's first bytes: OpenAI's formats but raw pcm16, which has no header.
fn audio_format(bytes: &[u8]) -> Option<(&'static str, &'static str)> {
    let starts = |magic: &[u8]| bytes.starts_with(magic);
    if starts(b"RIFF") && bytes.get(8..12) == Some(b"WAVE") {
        return Some(("audio/wav", "wav"));
    }
    if starts(b"ID3") {
        return Some(("audio/mpeg", "mp3"));
    }
    if starts(b"OggS") {
        return Some(("audio/ogg", "ogg"));
    }
    if starts(b"fLaC") {
        return Some(("audio/flac", "flac"));
    }
    // An MPEG frame header: 11 sync bits, then a layer of 00 for AAC's ADTS, else MP3.
    match bytes {
        [0xff, second, ..] if second & 0xf6 == 0xf0 => Some(("audio/aac", "aac")),
        [0xff, second, ..] if second & 0xe0 == 0xe0 && second & 0x06 != 0 => Some(("audio/mpeg", "mp3")),
        _ => None,
    }
}

/// The last segment of the URL's path, when it looks like a file name.
fn name_of_url(url: &str) -> Option<String> {
    let parsed = reqwest::Url::parse(url).ok()?;
    let last = parsed.path_segments()?.next_back()?;
    (last.contains('.') && last.len() <= 255).then(|| last.to_owned())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const PNG: &[u8] = b"\x89PNG\r\n\x1a\n-pixels";

    fn completion(message: Value) -> Value {
        json!({"id": "gen-1", "object": "chat.completion", "model": "m",
               "choices": [{"index": 0, "finish_reason": "stop", "message": message}]})
    }

    fn bytes_of(file: &FileIn) -> Vec<u8> {
        STANDARD.decode(file.data.as_deref().unwrap()).unwrap()
    }

    #[test]
    fn openrouter_and_litellm_images_become_inline_files_named_by_their_type() {
        let png = STANDARD.encode(PNG);
        let jpeg_unpadded = base64::engine::general_purpose::STANDARD_NO_PAD.encode(b"\xff\xd8\xffjpeg");
        // OpenRouter's shape, then LiteLLM's (with `detail` and `index`).
        let message = json!({"role": "assistant", "content": "Here you are.", "images": [
            {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{png}")}},
            {"type": "image_url", "index": 1,
             "image_url": {"url": format!("data:image/jpeg;base64,{jpeg_unpadded}"), "detail": "auto"}},
        ]});

        let outputs = of_completion(&completion(message));

        assert_eq!(outputs.transcript, None);
        let named: Vec<(Option<&str>, Option<&str>)> = outputs
            .files
            .iter()
            .map(|f| (f.name.as_deref(), f.mime.as_deref()))
            .collect();
        assert_eq!(
            named,
            [
                (Some("image-1.png"), Some("image/png")),
                (Some("image-2.jpg"), Some("image/jpeg"))
            ]
        );
        assert_eq!(bytes_of(&outputs.files[0]), PNG);
        assert_eq!(
            outputs.files[1].data.as_deref(),
            Some(STANDARD.encode(b"\xff\xd8\xffjpeg").as_str()),
            "padded again, as the gateway reads it"
        );
        assert!(outputs
            .files
            .iter()
            .all(|f| f.url.is_none() && f.caption.is_none()));
    }

    #[test]
    fn an_image_behind_an_http_url_goes_as_its_url() {
        let message = json!({"role": "assistant", "content": "", "images": [
            {"type": "image_url", "image_url": {"url": "https://cdn.example/out/cat.webp?sig=1"}},
            {"type": "image_url", "image_url": {"url": "https://cdn.example/render"}},
        ]});

        let files = of_completion(&completion(message)).files;

        assert_eq!(
            files[0].url.as_deref(),
            Some("https://cdn.example/out/cat.webp?sig=1")
        );
        assert_eq!(files[0].name.as_deref(), Some("cat.webp"));
        assert_eq!(
            files[1].name.as_deref(),
            Some("image-2"),
            "the gateway guesses no type"
        );
        assert!(files.iter().all(|f| f.data.is_none()));
    }

    #[test]
    fn openai_audio_becomes_a_file_named_by_its_bytes_and_its_transcript_the_text() {
        let mp3 = STANDARD.encode(b"ID3\x04\x00frames");
        // OpenAI's answer with `modalities: ["text", "audio"]`: no content, the words in audio.
        let message = json!({"role": "assistant", "content": null, "refusal": null, "audio": {
            "id": "audio_abc123", "expires_at": 1_729_018_505, "data": mp3,
            "transcript": "Yes, golden retrievers are known to be friendly."}});

        let outputs = of_completion(&completion(message));

        assert_eq!(
            outputs.transcript.as_deref(),
            Some("Yes, golden retrievers are known to be friendly.")
        );
        let [audio] = &outputs.files[..] else {
            panic!("one file: {:?}", outputs.files)
        };
        assert_eq!(
            (audio.name.as_deref(), audio.mime.as_deref()),
            (Some("answer.mp3"), Some("audio/mpeg"))
        );
        for (bytes, mime) in [
            (&b"RIFF\x24\x00\x00\x00WAVEfmt "[..], "audio/wav"),
            (b"OggS\x00\x02opus", "audio/ogg"),
            (b"fLaC\x00\x00", "audio/flac"),
            (b"\xff\xfb\x90\x64", "audio/mpeg"),
            (b"\xff\xf1\x50\x80", "audio/aac"),
        ] {
            assert_eq!(audio_format(bytes).map(|(m, _)| m), Some(mime), "{mime}");
        }
    }

    #[test]
    fn what_cannot_go_is_left_out_and_the_rest_still_goes() {
        let over_the_limit = STANDARD.encode(vec![0u8; INLINE_MAX_BYTES + 1]);
        let png = STANDARD.encode(PNG);
        let message = json!({"role": "assistant", "content": "text", "images": [
            {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{over_the_limit}")}},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,not base64!"}},
            {"type": "image_url", "image_url": {"url": "data:image/svg+xml,<svg/>"}},
            {"type": "image_url", "image_url": {"url": "file:///etc/passwd"}},
            {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{png}")}},
        ], "audio": {"id": "audio_1", "data": STANDARD.encode([0u8, 1, 0, 1]), "transcript": ""}});

        let outputs = of_completion(&completion(message));

        let names: Vec<_> = outputs.files.iter().map(|f| f.name.as_deref()).collect();
        assert_eq!(names, [Some("image-5.png")], "pcm16 has no header to name it by");
        assert_eq!(outputs.transcript, None, "an empty transcript is no text");
    }

    #[test]
    fn a_file_the_dispatchs_platform_refuses_is_left_out_and_any_goes_where_none_is_named() {
        let image = |mime: &str| inline(PNG, format!("image.{}", image_extension(mime)), mime);
        let files = vec![image("image/webp"), image("image/png")];

        let on_whatsapp = fit_for(files.clone(), Some(Platform::Whatsapp));
        let on_telegram = fit_for(files.clone(), Some(Platform::Telegram));

        let mimes =
            |files: &[FileIn]| -> Vec<String> { files.iter().filter_map(|f| f.mime.clone()).collect() };
        assert_eq!(mimes(&on_whatsapp), ["image/png"], "WhatsApp takes no WebP");
        assert_eq!(mimes(&on_telegram), ["image/webp", "image/png"]);
        assert_eq!(fit_for(files.clone(), None), files);
    }

    #[test]
    fn a_plain_completion_or_another_shape_has_no_files() {
        let plain = completion(json!({"role": "assistant", "content": "hi"}));
        assert_eq!(of_completion(&plain), Outputs::default());
        assert_eq!(of_completion(&json!({"content": "hi"})), Outputs::default());
        let many: Vec<Value> = (0..FILES_MAX + 2)
            .map(|_| json!({"type": "image_url", "image_url": {"url": "https://cdn.example/a.png"}}))
            .collect();
        let crowded = completion(json!({"role": "assistant", "content": "x", "images": many}));
        assert_eq!(of_completion(&crowded).files.len(), FILES_MAX);
    }
}
