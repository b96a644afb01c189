package main

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"testing/synctest"
	"time"

	"github.com/asynctool-go/asynctool"
	"github.com/asynctool-go/asynctool/asynctooltest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var errDown = errors.New("down")

// The page waits only for user, so in these tests user is the slowest
// backend: under synctest its 10ms are virtual and the order is exact.
func TestPage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		starts, page := Backends{
			User: asynctooltest.Sleeps[int64](10*time.Millisecond, "ada"),
			Cart: asynctooltest.Returns[int64](3),
			Recs: asynctooltest.Returns[int64]([]string{"lamp"}),
		}.Graph(42)
		rep := asynctooltest.Run(t, starts...)
		asynctooltest.RanBefore(t, rep, "user", "page")
		asynctooltest.RanOnce(t, rep, "page")
		assert.Equal(t, "Hello ada: 3 items; try lamp", page.Result().Value)
	})
}

func TestRecsDownFallsBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		starts, page := Backends{
			User: asynctooltest.Sleeps[int64](10*time.Millisecond, "ada"),
			Cart: asynctooltest.Returns[int64](3),
			Recs: asynctooltest.Fails[int64, []string](errDown),
		}.Graph(42)
		rep := asynctooltest.Run(t, starts...)
		asynctooltest.Failed(t, rep, "recs", errDown)
		asynctooltest.Succeeded(t, rep, "page")
		assert.Equal(t, "Hello ada: 3 items; try bestsellers", page.Result().Value)
	})
}

func TestSlowRecsDoNotDelayThePage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		recs := asynctooltest.Blocks[int64]([]string{"late"})
		starts, page := Backends{
			User: asynctooltest.Sleeps[int64](10*time.Millisecond, "ada"),
			Cart: asynctooltest.Sleeps[int64](time.Hour, 3),
			Recs: recs,
		}.Graph(42)
		rep := asynctooltest.RunWithin(t, time.Second, starts...)
		asynctooltest.Succeeded(t, rep, "page")
		asynctooltest.TimedOut(t, rep, "recs")
		assert.Equal(t, "Hello ada: 0 items; try bestsellers", page.Result().Value)
	})
}

// TestSlowRecsDoNotDelayTheResponse: the handler answers with the page,
// 10ms after the request, not at its one-second deadline.
func TestSlowRecsDoNotDelayTheResponse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		rec := serve(t, time.Second, Backends{
			User: asynctooltest.Sleeps[int64](10*time.Millisecond, "ada"),
			Cart: asynctooltest.Returns[int64](3),
			Recs: asynctooltest.Blocks[int64]([]string{"late"}),
		})
		assert.Equal(t, http.StatusOK, rec.Code)
		assert.Equal(t, "Hello ada: 3 items; try bestsellers\n", rec.Body.String())
		assert.Equal(t, 10*time.Millisecond, time.Since(start))
	})
}

// serve runs one request through a Handler with the given backends.
func serve(t *testing.T, timeout time.Duration, b Backends) *httptest.ResponseRecorder {
	a := asynctool.New()
	t.Cleanup(func() { _ = a.Close() })
	rec := httptest.NewRecorder()
	(&Handler{Async: a, Backends: b, Timeout: timeout}).ServeHTTP(rec, httptest.NewRequest("GET", "/?uid=42", nil))
	return rec
}

func TestUserDownIs502(t *testing.T) {
	rec := serve(t, 10*time.Second, Backends{
		User: asynctooltest.Fails[int64, string](errDown),
		Cart: asynctooltest.Returns[int64](3),
		Recs: asynctooltest.Returns[int64]([]string{"lamp"}),
	})
	assert.Equal(t, http.StatusBadGateway, rec.Code)
	assert.Contains(t, rec.Body.String(), "down")
}

func TestSlowUserIs504(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		user := asynctooltest.Blocks[int64]("ada")
		rec := serve(t, 100*time.Millisecond, Backends{
			User: user,
			Cart: asynctooltest.Returns[int64](3),
			Recs: asynctooltest.Returns[int64]([]string{"lamp"}),
		})
		assert.Equal(t, http.StatusGatewayTimeout, rec.Code)
		assert.Equal(t, 1, user.Calls())
	})
}

func TestBadUIDIs400(t *testing.T) {
	rec := httptest.NewRecorder()
	(&Handler{}).ServeHTTP(rec, httptest.NewRequest("GET", "/?uid=x", nil))
	assert.Equal(t, http.StatusBadRequest, rec.Code)
}

// TestClosedAsyncIs503: a request that arrives once the Async is closed
// (a server shutting down) gets no run at all; the page has no result,
// and no error to show, so the handler must say so from BeginWork's.
func TestClosedAsyncIs503(t *testing.T) {
	a := asynctool.New()
	require.NoError(t, a.Close())
	rec := httptest.NewRecorder()
	(&Handler{Async: a, Timeout: time.Second, Backends: Backends{
		User: asynctooltest.Returns[int64]("ada"),
		Cart: asynctooltest.Returns[int64](3),
		Recs: asynctooltest.Returns[int64]([]string{"lamp"}),
	}}).ServeHTTP(rec, httptest.NewRequest("GET", "/?uid=42", nil))
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
	assert.Contains(t, rec.Body.String(), asynctool.ErrClosed.Error())
}

// TestRenderReportsAnUnknownNode: render reads the backends by id, which
// only the run checks; a graph without the node it names (here, no run
// at all) makes it fail instead of rendering the page from zero values.
func TestRenderReportsAnUnknownNode(t *testing.T) {
	_, err := render(t.Context(), 42, asynctool.Wrappers{})
	assert.ErrorIs(t, err, asynctool.ErrUnknownID)
}
