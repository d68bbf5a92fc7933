package markdown_test

import (
	"fmt"

	"github.com/codellm/codellm/internal/markdown"
)

func ExampleExtract() {
	blocks, err := markdown.Extract([]markdown.Source{
		{Message: 0, Text: "Prose with ```inline``` backticks.\n```Python title=run.py\nprint(1)\n```\n"},
		{Message: 1, Text: "~~~~sh\necho '```'\n~~~~\n"},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, b := range blocks {
		fmt.Printf("%d messages[%d] line %d %q %q\n", b.Index, b.Message, b.Line, b.Label, b.Code)
	}
	_, err = markdown.Extract([]markdown.Source{{Message: 2, Text: "```bash\necho hi\n``` trailing\n"}})
	fmt.Println(err)
	// Output:
	// 0 messages[0] line 2 "python" "print(1)\n"
	// 1 messages[1] line 1 "sh" "echo '```'\n"
	// code block 1 (messages[2], line 1) opened with "```" is never closed
}
