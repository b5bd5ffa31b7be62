package mediaheader_test

import (
	"io"
	"os"
	"strings"
	"testing"

	"willow/mediaheader"
)

func head(t *testing.T, path string) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, mediaheader.SniffBytes)
	n, err := io.ReadFull(f, b)
	if err != nil && err != io.ErrUnexpectedEOF {
		t.Fatal(err)
	}
	return b[:n]
}

func ftyp(major string, compat ...string) []byte {
	size := 16 + 4*len(compat)
	b := []byte{0, 0, 0, byte(size)}
	b = append(b, "ftyp"+major+"\x00\x00\x00\x00"+strings.Join(compat, "")...)
	return append(b, make([]byte, 32)...)
}

func TestSniff(t *testing.T) {
	ebml := func(doc string) []byte {
		return append([]byte{0x1A, 0x45, 0xDF, 0xA3, 0x9F, 0x42, 0x86, 0x81, 0x01, 0x42, 0x82, 0x84}, doc+"\x42\x87"...)
	}
	ts := make([]byte, 400)
	ts[0], ts[188], ts[376] = 0x47, 0x47, 0x47
	cases := []struct {
		name  string
		head  []byte
		want  string // "" = refused
		video bool
	}{
		{"jpeg file", head(t, "../../shared/testdata/photos/mate_Wood.jpg"), mediaheader.TypeJPEG, false},
		{"png file", head(t, "../../shared/testdata/photos/skimage_coffee.png"), mediaheader.TypePNG, false},
		{"heic file", head(t, "testdata/small.heic"), mediaheader.TypeHEIC, false},
		{"truncated jpeg still a jpeg", head(t, "../../shared/testdata/bad/truncated.jpg"), mediaheader.TypeJPEG, false},
		{"avi file", head(t, "../../shared/testdata/videos/tree.avi"), mediaheader.TypeAVI, true},
		{"mpeg file", head(t, "../../shared/testdata/videos/cube.mpeg"), mediaheader.TypeMPEG, true},
		{"mp4", ftyp("isom", "iso2", "avc1", "mp41"), mediaheader.TypeMP4, true},
		{"mp4 unknown major", ftyp("XAVC", "mp42"), mediaheader.TypeMP4, true},
		{"mov", ftyp("qt  ", "qt  "), mediaheader.TypeQuickTime, true},
		{"old mov", []byte("\x00\x00\x00\x08wide\x00\x00\x00\x00mdat"), mediaheader.TypeQuickTime, true},
		{"3gp", ftyp("3gp4", "3gp4"), mediaheader.Type3GPP, true},
		{"heif", ftyp("mif1", "heic"), mediaheader.TypeHEIF, false},
		{"avif", ftyp("avif", "mif1"), mediaheader.TypeAVIF, false},
		{"webm", ebml("webm"), mediaheader.TypeWebM, true},
		{"mkv", ebml("matroska"), mediaheader.TypeMatroska, true},
		{"mpeg-ts", ts, mediaheader.TypeMPEGTS, true},
		{"html", []byte("<!DOCTYPE html><html><script>alert(1)</script>"), "", false},
		{"html after bom", []byte("\xEF\xBB\xBF<html><body onload=alert(1)>"), "", false},
		{"svg", []byte(`<?xml version="1.0"?><svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)"/>`), "", false},
		{"pdf", []byte("%PDF-1.7\n"), "", false},
		{"zip", []byte("PK\x03\x04\x14\x00"), "", false},
		{"gif", []byte("GIF89a\x01\x00\x01\x00"), "", false},
		{"ftyp of an unknown brand", ftyp("crx ", "abcd"), "", false},
		{"ebml of an unknown doc type", ebml("other"), "", false},
		{"text", []byte("just some text"), "", false},
		{"empty", nil, "", false},
		{"three bytes", []byte{0xFF, 0xD8}, "", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, ok := mediaheader.Sniff(c.head)
			if ok != (c.want != "") || got.ContentType != c.want || got.Video != c.video {
				t.Fatalf("Sniff = %+v %v, want %q video=%v", got, ok, c.want, c.video)
			}
			if ok && !got.Input {
				t.Fatalf("%s not accepted as input", got.ContentType)
			}
			if ok && !mediaheader.IsMedia(got.ContentType) {
				t.Fatalf("IsMedia(%s) = false", got.ContentType)
			}
		})
	}
	if got, ok := mediaheader.Sniff([]byte("RIFF\x00\x00\x00\x00WEBPVP8 ")); !ok || got.ContentType != mediaheader.TypeWebP || got.Input {
		t.Fatalf("webp: %+v %v, want served but not an input", got, ok)
	}
	for _, ct := range []string{"text/html", "text/html; charset=utf-8", "image/svg+xml", "application/octet-stream", ""} {
		if mediaheader.IsMedia(ct) {
			t.Errorf("IsMedia(%q) = true", ct)
		}
	}
}

func FuzzSniff(f *testing.F) {
	f.Add([]byte("<html>"))
	f.Add(ftyp("isom"))
	f.Add([]byte{0, 0, 0, 0xff, 'f', 't', 'y', 'p', 'h', 'e', 'i', 'c'})
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, ok := mediaheader.Sniff(b); ok != (got.ContentType != "") {
			t.Fatalf("Sniff(%q) = %+v %v", b, got, ok)
		}
	})
}
