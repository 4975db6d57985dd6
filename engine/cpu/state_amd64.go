//go:build !purego

package cpu

//go:noescape
func scaleAxpyAVX2(row *float32, s, a float32, acc *float32, n int)

//go:noescape
func axpyAxpyAVX2(row, u *float32, a, c float32, acc *float32, n int)

func scaleAxpyFast(row []float32, s, a float32, acc []float32) {
	m := len(row) &^ 7
	if m > 0 {
		_ = acc[m-1]
		scaleAxpyAVX2(&row[0], s, a, &acc[0], m)
	}
	if m < len(row) {
		scaleAxpyGo(row[m:], s, a, acc[m:])
	}
}

func axpyAxpyFast(row, u []float32, a, c float32, acc []float32) {
	m := len(row) &^ 7
	if m > 0 {
		_, _ = u[m-1], acc[m-1]
		axpyAxpyAVX2(&row[0], &u[0], a, c, &acc[0], m)
	}
	if m < len(row) {
		axpyAxpyGo(row[m:], u[m:], a, c, acc[m:])
	}
}

func init() {
	if hasAVX2 {
		scaleAxpy, axpyAxpy = scaleAxpyFast, axpyAxpyFast
	}
}
