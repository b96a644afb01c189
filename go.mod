module github.com/asynctool-go/asynctool

go 1.26

require (
	github.com/stretchr/testify v1.11.1
	go.uber.org/goleak v1.3.0
	golang.org/x/sync v0.18.0
)
