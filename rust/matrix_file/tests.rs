//! The matrix file written and read back, and refused when damaged or changed under it.

use std::fs;

use super::*;

fn sample(dim: usize, rows: usize) -> (Vec<f32>, Vec<u64>) {
    let values = (0..rows * dim).map(|i| (i as f32 * 0.37).sin()).collect();
    (values, (0..rows as u64).map(|i| i * 10).collect())
}

fn write_f32(path: &Path, dim: usize, rows: usize) {
    let (values, ids) = sample(dim, rows);
    let masks: Vec<u64> = (0..rows as u64 * 2).collect();
    let data = MatrixData {
        dim,
        rows,
        model_id: "test-model",
        ids: &ids,
        masks: &masks,
        mask_words: 2,
        f32_rows: &values,
        quantized: Quantized::None,
        residual: 0.0,
    };
    write(path, &data).unwrap();
}

#[test]
fn round_trip_keeps_every_section() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.tgi");
    let (dim, rows) = (7, 5);
    write_f32(&path, dim, rows);
    let file = MatrixFile::open(&path, OpenOptions::default()).unwrap();
    let (values, ids) = sample(dim, rows);
    assert_eq!((file.dim(), file.rows(), file.stride()), (7, 5, 16));
    assert_eq!(file.model_id(), "test-model");
    assert_eq!(file.ids(), &ids[..]);
    assert_eq!(file.masks(), &(0..10).collect::<Vec<u64>>()[..]);
    for r in 0..rows {
        assert_eq!(&file.f32_rows()[r * 16..r * 16 + 7], &values[r * 7..r * 7 + 7]);
        assert!(file.f32_rows()[r * 16 + 7..(r + 1) * 16].iter().all(|&x| x == 0.0));
    }
    assert_eq!(file.f32_rows().as_ptr().align_offset(ALIGN), 0);
    let leftovers: Vec<_> = fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(leftovers.len(), 1, "the temporary file must be renamed away");
}

#[test]
fn a_file_changed_in_place_after_open_is_a_format_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.tgi");
    write_f32(&path, 7, 5);
    let good = fs::read(&path).unwrap();
    let file = MatrixFile::open(&path, OpenOptions::default()).unwrap();
    file.check_unchanged().unwrap();
    // What `cp` over a live file does: truncate, then write the new bytes.
    fs::write(&path, &good[..HEADER_LEN]).unwrap();
    let err = file.check_unchanged().unwrap_err().to_string();
    assert!(err.contains("cut or grown in place"), "{err}");
    assert!(matches!(file.verify(), Err(Error::Format { .. })));
    // The same length again, but other bytes written since: still refused.
    let mut other = good.clone();
    other[HEADER_LEN] ^= 1;
    std::thread::sleep(std::time::Duration::from_millis(20));
    fs::write(&path, &other).unwrap();
    let err = file.check_unchanged().unwrap_err().to_string();
    assert!(err.contains("rewritten in place"), "{err}");
    // Replaced by rename, the safe way: the open file is untouched.
    let fresh = MatrixFile::open(&path, OpenOptions { verify: false, expected_dim: None });
    let fresh = fresh.unwrap();
    write_f32(&path, 7, 5);
    fresh.check_unchanged().unwrap();
}

#[test]
fn only_regular_files_are_opened() {
    let dir = tempfile::tempdir().unwrap();
    let err = MatrixFile::open(dir.path(), OpenOptions::default()).unwrap_err();
    assert!(err.to_string().contains("not a regular file"), "{err}");
    #[cfg(unix)]
    {
        let err = MatrixFile::open(Path::new("/dev/zero"), OpenOptions::default());
        assert!(err.unwrap_err().to_string().contains("not a regular file"));
    }
    let missing = MatrixFile::open(&dir.path().join("absent"), OpenOptions::default());
    assert!(matches!(missing, Err(Error::Io { .. })));
}

#[test]
fn damaged_files_are_format_errors() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.tgi");
    write_f32(&path, 7, 5);
    let good = fs::read(&path).unwrap();
    type Damage = Box<dyn Fn(&mut Vec<u8>)>;
    let cases: Vec<(&str, Damage)> = vec![
        ("truncated", Box::new(|b| b.truncate(b.len() - 1))),
        ("truncated", Box::new(|b| b.truncate(60))),
        ("payload checksum", Box::new(|b| *b.last_mut().unwrap() ^= 1)),
        ("magic", Box::new(|b| b[0] = b'X')),
        ("version", Box::new(|b| b[8] = 2)),
        ("header checksum", Box::new(|b| b[16] = 9)),
        ("unexpected bytes", Box::new(|b| b.push(0))),
    ];
    for (needle, damage) in cases {
        let mut bytes = good.clone();
        damage(&mut bytes);
        fs::write(&path, &bytes).unwrap();
        let err = MatrixFile::open(&path, OpenOptions::default()).unwrap_err();
        assert!(matches!(err, Error::Format { .. }), "{needle}: {err}");
        assert!(err.to_string().contains(needle), "{needle}: {err}");
    }
    fs::write(&path, &good).unwrap();
    let wrong_dim = OpenOptions { verify: true, expected_dim: Some(8) };
    let err = MatrixFile::open(&path, wrong_dim).unwrap_err();
    assert!(err.to_string().contains("dimension is 7, expected 8"), "{err}");
}

#[test]
fn an_int8_scale_that_is_no_finite_value_is_a_format_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.tgi");
    let (dim, rows) = (7, 5);
    let (values, ids) = sample(dim, rows);
    let codes = vec![1i8; rows * dim];
    let scales = vec![0.01f32; rows];
    let data = MatrixData {
        dim,
        rows,
        model_id: "test-model",
        ids: &ids,
        masks: &[],
        mask_words: 0,
        f32_rows: &values,
        quantized: Quantized::Int8 { codes: &codes, scales: &scales },
        residual: 0.0,
    };
    write(&path, &data).unwrap();
    let good = fs::read(&path).unwrap();
    let scales_at = u64::from_le_bytes(good[72..80].try_into().unwrap()) as usize;
    for scale in [f32::NAN, f32::INFINITY, -0.5] {
        let mut bytes = good.clone();
        bytes[scales_at + 8..scales_at + 12].copy_from_slice(&scale.to_le_bytes());
        // Resealed, as any writer of the file can: both checksums pass.
        let payload_crc = crc32fast::hash(&bytes[HEADER_LEN..]);
        bytes[104..108].copy_from_slice(&payload_crc.to_le_bytes());
        bytes[108..112].fill(0);
        let header_crc = crc32fast::hash(&bytes[..HEADER_LEN]);
        bytes[108..112].copy_from_slice(&header_crc.to_le_bytes());
        fs::write(&path, &bytes).unwrap();
        for verify in [true, false] {
            let err = MatrixFile::open(&path, OpenOptions { verify, expected_dim: None });
            let err = err.unwrap_err();
            assert!(matches!(err, Error::Format { .. }), "{scale}: {err}");
            assert!(err.to_string().contains("scale of row 2"), "{scale}: {err}");
        }
        let bad = vec![scale; rows];
        let refused =
            MatrixData { quantized: Quantized::Int8 { codes: &codes, scales: &bad }, ..data };
        assert!(matches!(write(&path, &refused), Err(Error::InvalidArgument(_))), "{scale}");
    }
}

#[cfg(unix)]
#[test]
fn a_written_file_is_for_its_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.tgi");
    write_f32(&path, 7, 5);
    let mode = fs::metadata(&path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "{mode:o}");
}
