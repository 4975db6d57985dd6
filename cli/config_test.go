package cli

import "testing"

func TestParseBytes(t *testing.T) {
	cases := []struct {
		in   string
		want int64
		bad  bool
	}{
		{in: "8GiB", want: 8 << 30},
		{in: "8gib", want: 8 << 30},
		{in: "512MiB", want: 512 << 20},
		{in: "6GB", want: 6e9},
		{in: "1.5G", want: 3 << 29},
		{in: "1073741824", want: 1 << 30},
		{in: " 2 GiB ", want: 2 << 30},
		{in: "", bad: true},
		{in: "-1GiB", bad: true},
		{in: "eight", bad: true},
		{in: "8XB", bad: true},
		{in: "0", bad: true},
	}
	for _, tc := range cases {
		got, err := ParseBytes(tc.in)
		if tc.bad {
			if err == nil {
				t.Errorf("ParseBytes(%q) = %d, want an error", tc.in, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
}
