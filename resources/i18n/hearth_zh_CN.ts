<?xml version="1.0" encoding="utf-8"?>
<!DOCTYPE TS>
<TS version="2.1" language="zh_CN">
<context>
    <name>Attachments</name>
    <message>
        <source>Text</source>
        <translation>文本</translation>
    </message>
    <message>
        <source>Code</source>
        <translation>代码</translation>
    </message>
    <message>
        <source>Image</source>
        <translation>图片</translation>
    </message>
    <message>
        <source>1 page</source>
        <translation>1 页</translation>
    </message>
    <message>
        <source>{count} pages</source>
        <translation>{count} 页</translation>
    </message>
    <message>
        <source>Remove this file from the message</source>
        <translation>从消息中移除此文件</translation>
    </message>
    <message>
        <source>Attach files…</source>
        <translation>附加文件…</translation>
    </message>
    <message>
        <source>Attach documents, or images for a model that can see, to the next message (you can also drop or paste files)</source>
        <translation>为下一条消息附加文档，或给能看图的模型附加图片（也可以拖放或粘贴文件）</translation>
    </message>
    <message>
        <source>Images: {why}</source>
        <translation>图片：{why}</translation>
    </message>
    <message>
        <source>Attach files</source>
        <translation>附加文件</translation>
    </message>
    <message>
        <source>Pasted image {time}.png</source>
        <translation>粘贴的图片 {time}.png</translation>
    </message>
    <message>
        <source>Reading files…</source>
        <translation>正在读取文件…</translation>
    </message>
    <message>
        <source>Source passage</source>
        <translation>来源段落</translation>
    </message>
    <message>
        <source>Open file</source>
        <translation>打开文件</translation>
    </message>
    <message>
        <source>This file is in a collection, not stored with the chat</source>
        <translation>此文件属于文档集合，未随对话保存</translation>
    </message>
</context>
<context>
    <name>ChatArea</name>
    <message>
        <source>Editing your message. Sending makes a new version; the original stays one click away.</source>
        <translation>正在编辑你的消息。发送后会生成新版本，原版本仍可随时切换回去。</translation>
    </message>
    <message>
        <source>Cancel</source>
        <translation>取消</translation>
    </message>
    <message>
        <source>The conversation database is damaged, so Hearth opened it read-only and changed nothing. Export your conversations, or restore a backup.</source>
        <translation>对话数据库已损坏，因此 Hearth 以只读方式打开了它，未做任何更改。请导出你的对话，或从备份恢复。</translation>
    </message>
    <message>
        <source>Export all conversations…</source>
        <translation>导出所有对话…</translation>
    </message>
    <message>
        <source>Restore from backup…</source>
        <translation>从备份恢复…</translation>
    </message>
    <message>
        <source>Message Hearth… (Enter to send, Shift+Enter for a new line)</source>
        <translation>给 Hearth 发消息…（Enter 发送，Shift+Enter 换行）</translation>
    </message>
    <message>
        <source>Send</source>
        <translation>发送</translation>
    </message>
    <message>
        <source>Stop</source>
        <translation>停止</translation>
    </message>
    <message>
        <source>Waiting for the attached files to be read</source>
        <translation>正在等待附加的文件读取完成</translation>
    </message>
    <message>
        <source>Restored from {name}. Start Hearth again to continue writing.</source>
        <translation>已从 {name} 恢复。请重新启动 Hearth 以继续写入。</translation>
    </message>
    <message>
        <source>Install a model before sending a message.</source>
        <translation>请先安装模型再发送消息。</translation>
    </message>
    <message>
        <source>Delete this message and everything after it on this branch? Other versions stay.</source>
        <translation>要删除这条消息以及此分支中其后的所有内容吗？其他版本会保留。</translation>
    </message>
    <message>
        <source>Delete message</source>
        <translation>删除消息</translation>
    </message>
    <message>
        <source>Delete</source>
        <translation>删除</translation>
    </message>
    <message>
        <source>{name} is no longer stored; attach it again to open it.</source>
        <translation>{name} 已不再保存；请重新附加后再打开。</translation>
    </message>
    <message>
        <source>No application could open {name}.</source>
        <translation>没有应用程序能打开 {name}。</translation>
    </message>
</context>
<context>
    <name>ChatFiles</name>
    <message>
        <source>Open a chat to export it.</source>
        <translation>请先打开一个对话再导出。</translation>
    </message>
    <message>
        <source>Markdown (*.md)</source>
        <translation>Markdown（*.md）</translation>
    </message>
    <message>
        <source>JSON (*.json)</source>
        <translation>JSON（*.json）</translation>
    </message>
    <message>
        <source>Export chat</source>
        <translation>导出对话</translation>
    </message>
    <message>
        <source>Exported to {path}</source>
        <translation>已导出到 {path}</translation>
    </message>
    <message>
        <source>Export all chats to a folder</source>
        <translation>将所有对话导出到文件夹</translation>
    </message>
    <message numerus="yes">
        <source>Exported %n chat(s) to {folder}</source>
        <translation>
            <numerusform>已将 %n 个对话导出到 {folder}</numerusform>
        </translation>
    </message>
    <message numerus="yes">
        <source>%n could not be read</source>
        <translation>
            <numerusform>%n 个无法读取</numerusform>
        </translation>
    </message>
    <message>
        <source>Import chats (Hearth JSON or ChatGPT conversations.json)</source>
        <translation>导入对话（Hearth JSON 或 ChatGPT 的 conversations.json）</translation>
    </message>
    <message>
        <source>ChatGPT export</source>
        <translation>ChatGPT 导出文件</translation>
    </message>
    <message>
        <source>Hearth export</source>
        <translation>Hearth 导出文件</translation>
    </message>
    <message numerus="yes">
        <source>Imported %n chat(s) from the {source}</source>
        <translation>
            <numerusform>已从{source}导入 %n 个对话</numerusform>
        </translation>
    </message>
    <message numerus="yes">
        <source>%n message(s) left out (system, tool or empty)</source>
        <translation>
            <numerusform>省略了 %n 条消息（系统、工具或空消息）</numerusform>
        </translation>
    </message>
    <message>
        <source>Export all conversations to a folder</source>
        <translation>将所有对话导出到文件夹</translation>
    </message>
    <message numerus="yes">
        <source>Exported %n conversation(s)</source>
        <translation>
            <numerusform>已导出 %n 个对话</numerusform>
        </translation>
    </message>
    <message>
        <source>There are no backups in {folder}.</source>
        <translation>{folder} 中没有备份。</translation>
    </message>
    <message>
        <source>Restore from backup</source>
        <translation>从备份恢复</translation>
    </message>
    <message>
        <source>Backup to restore:</source>
        <translation>要恢复的备份：</translation>
    </message>
    <message>
        <source>Replace the damaged database with this backup? The damaged file is kept in the backups folder.</source>
        <translation>要用此备份替换已损坏的数据库吗？已损坏的文件会保留在备份文件夹中。</translation>
    </message>
    <message>
        <source>Restore</source>
        <translation>恢复</translation>
    </message>
    <message numerus="yes">
        <source>%n attached file(s) were in neither the backup nor the file store: their messages show them as no longer stored.</source>
        <translation>
            <numerusform>有 %n 个附件既不在备份中，也不在文件存储中：相应的消息会显示它们已不再保存。</numerusform>
        </translation>
    </message>
    <message>
        <source>database only</source>
        <translation>仅数据库</translation>
    </message>
    <message numerus="yes">
        <source>%n attached file(s)</source>
        <translation>
            <numerusform>%n 个附件</numerusform>
        </translation>
    </message>
</context>
<context>
    <name>ChatSettings</name>
    <message>
        <source>Settings for the next new chat with {model}.</source>
        <translation>使用 {model} 的下一个新对话的设置。</translation>
    </message>
    <message>
        <source>This chat&apos;s own settings.</source>
        <translation>此对话自己的设置。</translation>
    </message>
    <message>
        <source>This chat follows the defaults for {model}; a change here is saved for this chat.</source>
        <translation>此对话使用 {model} 的默认设置；在此处的修改只保存到此对话。</translation>
    </message>
    <message>
        <source>Settings saved for this chat</source>
        <translation>已为此对话保存设置</translation>
    </message>
    <message>
        <source>New chats with {model} start from these settings</source>
        <translation>使用 {model} 的新对话将以这些设置开始</translation>
    </message>
    <message>
        <source>Preset “{name}” saved</source>
        <translation>已保存预设“{name}”</translation>
    </message>
    <message>
        <source>Delete the preset “{name}”?</source>
        <translation>要删除预设“{name}”吗？</translation>
    </message>
    <message>
        <source>Delete preset</source>
        <translation>删除预设</translation>
    </message>
    <message>
        <source>Delete</source>
        <translation>删除</translation>
    </message>
</context>
<context>
    <name>CollectionChip</name>
    <message>
        <source>Collection: {name}</source>
        <translation>文档集合：{name}</translation>
    </message>
    <message>
        <source>Stop answering from this collection in this chat</source>
        <translation>在此对话中不再根据此文档集合回答</translation>
    </message>
</context>
<context>
    <name>CollectionPicker</name>
    <message>
        <source>Collections</source>
        <translation>文档集合</translation>
    </message>
    <message>
        <source>Choose the document collections this chat answers from</source>
        <translation>选择此对话用来回答问题的文档集合</translation>
    </message>
    <message>
        <source>No collections yet</source>
        <translation>还没有文档集合</translation>
    </message>
    <message>
        <source>Manage collections…</source>
        <translation>管理文档集合…</translation>
    </message>
</context>
<context>
    <name>ContextDialog</name>
    <message>
        <source>Context of {server}</source>
        <translation>{server} 的上下文</translation>
    </message>
    <message>
        <source>Save</source>
        <translation>保存</translation>
    </message>
    <message>
        <source>Tokens of prompt and reply together for the models of {server} (blank: automatic):</source>
        <translation>{server} 的模型可容纳的提示与回复词元总数（留空：自动）：</translation>
    </message>
</context>
<context>
    <name>ContextMeter</name>
    <message>
        <source>When full: refuse to send</source>
        <translation>上下文满时：拒绝发送</translation>
    </message>
    <message>
        <source>When full: leave out the oldest turns (system prompt kept)</source>
        <translation>上下文满时：省略最早的轮次（保留系统提示词）</translation>
    </message>
    <message>
        <source>Change what happens when a chat no longer fits the context window</source>
        <translation>更改对话超出上下文窗口时的处理方式</translation>
    </message>
    <message>
        <source>Context: not measured yet</source>
        <translation>上下文：尚未计算</translation>
    </message>
    <message>
        <source>≈ {used} / {total} tokens (estimate)</source>
        <translation>≈ {used} / {total} 个词元（估算）</translation>
    </message>
    <message>
        <source>{used} / {total} tokens</source>
        <translation>{used} / {total} 个词元</translation>
    </message>
    <message>
        <source>Probably too long for the server&apos;s context: it may refuse it</source>
        <translation>可能超出服务器的上下文：服务器可能会拒绝</translation>
    </message>
    <message>
        <source>Too long for the context window: Hearth will refuse to send</source>
        <translation>超出上下文窗口：Hearth 将拒绝发送</translation>
    </message>
    <message numerus="yes">
        <source>%n oldest message(s) will be left out</source>
        <translation>
            <numerusform>将省略最早的 %n 条消息</numerusform>
        </translation>
    </message>
    <message numerus="yes">
        <source>Documents: up to {tokens} tokens · %n file(s) searched, not sent whole</source>
        <translation>
            <numerusform>文档：最多 {tokens} 个词元 · %n 个文件将被检索，不整篇发送</numerusform>
        </translation>
    </message>
    <message>
        <source>Documents: up to {tokens} tokens · passages from {names}</source>
        <translation>文档：最多 {tokens} 个词元 · 段落来自 {names}</translation>
    </message>
    <message>
        <source>Documents: {tokens} tokens</source>
        <translation>文档：{tokens} 个词元</translation>
    </message>
    <message>
        <source>Documents take {tokens} of these tokens.</source>
        <translation>其中文档占 {tokens} 个词元。</translation>
    </message>
    <message>
        <source>The definitions of the tools this chat may call take {tokens} of these tokens.</source>
        <translation>其中此对话可调用的工具定义占 {tokens} 个词元。</translation>
    </message>
    <message>
        <source>Too long to send whole, so searched when you send: {names}. Only the passages most relevant to your message go in, up to {tokens} tokens.</source>
        <translation>太长，无法整篇发送，发送时将检索：{names}。只放入与你的消息最相关的段落，最多 {tokens} 个词元。</translation>
    </message>
    <message>
        <source>The collections this chat answers from are searched when you send: {names}. The passages most relevant to your message go in, up to {tokens} tokens.</source>
        <translation>发送时会检索此对话所用的文档集：{names}。只放入与你的消息最相关的段落，最多 {tokens} 个词元。</translation>
    </message>
    <message>
        <source>Estimated at about four characters a token: the server&apos;s own tokenizer is not here.</source>
        <translation>按约每四个字符一个词元估算：这里没有服务器自己的分词器。</translation>
    </message>
    <message>
        <source>The {total}-token context is this server&apos;s setting.</source>
        <translation>{total} 个词元的上下文是为此服务器设置的。</translation>
    </message>
    <message>
        <source>The {total}-token context is what the server reports for this model.</source>
        <translation>{total} 个词元的上下文是服务器为此模型报告的。</translation>
    </message>
    <message>
        <source>The server does not report its context length, so {total} tokens is assumed: set the real one in Manage servers.</source>
        <translation>服务器未报告其上下文长度，因此假定为 {total} 个词元：请在“管理服务器”中设置实际值。</translation>
    </message>
</context>
<context>
    <name>DocumentsDialog</name>
    <message>
        <source>Documents</source>
        <translation>文档</translation>
    </message>
</context>
<context>
    <name>DocumentsPanel</name>
    <message>
        <source>Indexed</source>
        <translation>已索引</translation>
    </message>
    <message>
        <source>Changed</source>
        <translation>已更改</translation>
    </message>
    <message>
        <source>Waiting</source>
        <translation>等待中</translation>
    </message>
    <message>
        <source>Failed</source>
        <translation>失败</translation>
    </message>
    <message>
        <source>Missing</source>
        <translation>缺失</translation>
    </message>
    <message>
        <source>A collection is a set of files and folders that chats can answer from. Hearth reads them where they are (nothing is copied) and keeps a searchable index of their text.</source>
        <translation>文档集合是一组文件和文件夹，对话可以根据它们回答问题。Hearth 在原位置读取它们（不复制任何文件），并为其文本保留一个可搜索的索引。</translation>
    </message>
    <message>
        <source>Collection</source>
        <translation>文档集合</translation>
    </message>
    <message>
        <source>Files</source>
        <translation>文件</translation>
    </message>
    <message>
        <source>Passages</source>
        <translation>段落</translation>
    </message>
    <message>
        <source>No collections yet.</source>
        <translation>还没有文档集合。</translation>
    </message>
    <message>
        <source>&amp;New collection…</source>
        <translation>新建文档集合(&amp;N)…</translation>
    </message>
    <message>
        <source>&amp;Delete collection…</source>
        <translation>删除文档集合(&amp;D)…</translation>
    </message>
    <message>
        <source>Files and folders</source>
        <translation>文件和文件夹</translation>
    </message>
    <message>
        <source>Add &amp;files…</source>
        <translation>添加文件(&amp;F)…</translation>
    </message>
    <message>
        <source>Add f&amp;older…</source>
        <translation>添加文件夹(&amp;O)…</translation>
    </message>
    <message>
        <source>&amp;Remove selected path</source>
        <translation>移除所选路径(&amp;R)</translation>
    </message>
    <message>
        <source>Take it out of the collection; the files themselves are not touched</source>
        <translation>将其移出文档集合；文件本身不受影响</translation>
    </message>
    <message>
        <source>Refres&amp;h</source>
        <translation>刷新(&amp;H)</translation>
    </message>
    <message>
        <source>Index the files that are new or changed since the last time</source>
        <translation>为上次以来新增或更改的文件建立索引</translation>
    </message>
    <message>
        <source>&amp;Cancel</source>
        <translation>取消(&amp;C)</translation>
    </message>
    <message>
        <source>Stop indexing; what is indexed stays indexed</source>
        <translation>停止索引；已索引的内容会保留</translation>
    </message>
    <message>
        <source>File</source>
        <translation>文件</translation>
    </message>
    <message>
        <source>Status</source>
        <translation>状态</translation>
    </message>
    <message>
        <source>Reason</source>
        <translation>原因</translation>
    </message>
    <message>
        <source>{indexed} of {total}</source>
        <translation>{indexed} / {total}</translation>
    </message>
    <message numerus="yes">
        <source>%n file(s)</source>
        <translation>
            <numerusform>%n 个文件</numerusform>
        </translation>
    </message>
    <message>
        <source>{count} indexed</source>
        <translation>{count} 个已索引</translation>
    </message>
    <message>
        <source>{count} to index</source>
        <translation>{count} 个待索引</translation>
    </message>
    <message>
        <source>{count} failed</source>
        <translation>{count} 个失败</translation>
    </message>
    <message>
        <source>{count} missing</source>
        <translation>{count} 个缺失</translation>
    </message>
    <message numerus="yes">
        <source>%n passage(s)</source>
        <translation>
            <numerusform>%n 个段落</numerusform>
        </translation>
    </message>
    <message>
        <source>Indexing…</source>
        <translation>正在索引…</translation>
    </message>
    <message>
        <source>Looking for changes in {collection}…</source>
        <translation>正在检查 {collection} 的更改…</translation>
    </message>
    <message>
        <source>Indexing {collection}: {done} of {total} files, {passages} passages</source>
        <translation>正在索引 {collection}：第 {done} / {total} 个文件，{passages} 个段落</translation>
    </message>
    <message>
        <source>(then: {names})</source>
        <translation>（之后：{names}）</translation>
    </message>
    <message>
        <source>{count} unchanged</source>
        <translation>{count} 个未更改</translation>
    </message>
    <message>
        <source>{collection}: cancelled; {counts}</source>
        <translation>{collection}：已取消；{counts}</translation>
    </message>
    <message>
        <source>{collection}: {counts}</source>
        <translation>{collection}：{counts}</translation>
    </message>
    <message>
        <source>New collection</source>
        <translation>新建文档集合</translation>
    </message>
    <message>
        <source>Name of the collection:</source>
        <translation>文档集合名称：</translation>
    </message>
    <message>
        <source>Delete the collection “{name}” and its index? Your files stay where they are; chats stop answering from it.</source>
        <translation>删除文档集合“{name}”及其索引吗？您的文件保留在原处；对话将不再根据它回答。</translation>
    </message>
    <message>
        <source>Delete collection</source>
        <translation>删除文档集合</translation>
    </message>
    <message>
        <source>Delete</source>
        <translation>删除</translation>
    </message>
    <message>
        <source>Add files to {name}</source>
        <translation>向 {name} 添加文件</translation>
    </message>
    <message>
        <source>Add a folder to {name}</source>
        <translation>向 {name} 添加文件夹</translation>
    </message>
    <message>
        <source>Stopping…</source>
        <translation>正在停止…</translation>
    </message>
    <message>
        <source>Created {name}: add files or folders to it.</source>
        <translation>已创建 {name}：请向其中添加文件或文件夹。</translation>
    </message>
    <message>
        <source>Deleted {name}.</source>
        <translation>已删除 {name}。</translation>
    </message>
</context>
<context>
    <name>DownloadRow</name>
    <message>
        <source>Pause</source>
        <translation>暂停</translation>
    </message>
    <message>
        <source>Retry</source>
        <translation>重试</translation>
    </message>
    <message>
        <source>Resume</source>
        <translation>继续</translation>
    </message>
    <message>
        <source>Cancel</source>
        <translation>取消</translation>
    </message>
    <message>
        <source>{done} of {total}</source>
        <translation>{done} / {total}</translation>
    </message>
    <message>
        <source>Waiting for another download to finish…</source>
        <translation>正在等待另一个下载完成…</translation>
    </message>
    <message>
        <source>Starting…</source>
        <translation>正在开始…</translation>
    </message>
    <message>
        <source> · part {part} of {parts}</source>
        <translation> · 第 {part}/{parts} 部分</translation>
    </message>
    <message>
        <source>{amount} · {speed} · {eta} left{part}</source>
        <translation>{amount} · {speed} · 剩余 {eta}{part}</translation>
    </message>
    <message>
        <source>Paused at {amount}; resume it now or after a restart.</source>
        <translation>已暂停于 {amount}；可以现在继续，也可以重启后继续。</translation>
    </message>
    <message>
        <source>Verified (SHA-256) and installed as {name}.</source>
        <translation>已校验（SHA-256）并安装为 {name}。</translation>
    </message>
    <message>
        <source>Cancelled; the partial file was deleted.</source>
        <translation>已取消；未完成的文件已删除。</translation>
    </message>
</context>
<context>
    <name>HitDelegate</name>
    <message>
        <source>Title</source>
        <translation>标题</translation>
    </message>
    <message>
        <source>You</source>
        <translation>你</translation>
    </message>
    <message>
        <source>Hearth (thinking)</source>
        <translation>Hearth（思考）</translation>
    </message>
    <message>
        <source>Hearth (tool call)</source>
        <translation>Hearth（工具调用）</translation>
    </message>
    <message>
        <source>Tool</source>
        <translation>工具</translation>
    </message>
    <message>
        <source>Hearth</source>
        <translation>Hearth</translation>
    </message>
</context>
<context>
    <name>HubSettingsPage</name>
    <message>
        <source>Hugging Face token</source>
        <translation>Hugging Face 令牌</translation>
    </message>
    <message>
        <source>&amp;Token</source>
        <translation>令牌(&amp;T)</translation>
    </message>
    <message>
        <source>hf_… (for gated and private models)</source>
        <translation>hf_…（用于需授权和私有的模型）</translation>
    </message>
    <message>
        <source>Save</source>
        <translation>保存</translation>
    </message>
    <message>
        <source>Remove</source>
        <translation>移除</translation>
    </message>
    <message>
        <source>Hub endpoint</source>
        <translation>Hub 地址</translation>
    </message>
    <message>
        <source>&amp;Address</source>
        <translation>地址(&amp;A)</translation>
    </message>
    <message>
        <source>A Hugging Face mirror or internal server; empty: $HF_ENDPOINT, else huggingface.co</source>
        <translation>Hugging Face 镜像或内部服务器；留空则使用 $HF_ENDPOINT，否则使用 huggingface.co</translation>
    </message>
    <message>
        <source>Apply</source>
        <translation>应用</translation>
    </message>
    <message>
        <source>Model updates</source>
        <translation>模型更新</translation>
    </message>
    <message>
        <source>Check the Hub for updates to downloaded models once a day</source>
        <translation>每天检查一次 Hub 上已下载模型的更新</translation>
    </message>
    <message>
        <source>When the Models window opens, at most once a day; nothing is downloaded until you press Update</source>
        <translation>在打开模型窗口时检查，每天最多一次；在按下“更新”之前不会下载任何内容</translation>
    </message>
    <message>
        <source>Searches and downloads use {endpoint}.</source>
        <translation>搜索和下载使用 {endpoint}。</translation>
    </message>
    <message>
        <source>Asking the system keyring…</source>
        <translation>正在访问系统密钥环…</translation>
    </message>
    <message>
        <source>A token is saved in the system keyring ({backend}).</source>
        <translation>令牌已保存在系统密钥环中（{backend}）。</translation>
    </message>
    <message>
        <source>Session only: the token is used until Hearth closes, not saved. {reason}</source>
        <translation>仅限本次会话：令牌在 Hearth 关闭前有效，不会保存。{reason}</translation>
    </message>
    <message>
        <source>No token. The system keyring cannot be used: {reason}</source>
        <translation>没有令牌。无法使用系统密钥环：{reason}</translation>
    </message>
    <message>
        <source>No token set.</source>
        <translation>未设置令牌。</translation>
    </message>
</context>
<context>
    <name>KeyDialog</name>
    <message>
        <source>API key for {server}</source>
        <translation>{server} 的 API 密钥</translation>
    </message>
    <message>
        <source>kept in the system keyring</source>
        <translation>保存在系统密钥环中</translation>
    </message>
    <message>
        <source>The address is not https: the key and your chats travel unencrypted.</source>
        <translation>该地址不是 https：密钥和你的对话将以未加密方式传输。</translation>
    </message>
    <message>
        <source>Save key</source>
        <translation>保存密钥</translation>
    </message>
    <message>
        <source>The new API key for {url}:</source>
        <translation>{url} 的新 API 密钥：</translation>
    </message>
</context>
<context>
    <name>LibraryDialog</name>
    <message>
        <source>Models</source>
        <translation>模型</translation>
    </message>
</context>
<context>
    <name>LibraryPanel</name>
    <message>
        <source>Search the Hub for GGUF models (e.g. qwen, llama, gemma)</source>
        <translation>在 Hub 上搜索 GGUF 模型（例如 qwen、llama、gemma）</translation>
    </message>
    <message>
        <source>Search</source>
        <translation>搜索</translation>
    </message>
    <message>
        <source>Token &amp;&amp; Hub…</source>
        <translation>令牌与 Hub…</translation>
    </message>
    <message>
        <source>Repository</source>
        <translation>仓库</translation>
    </message>
    <message>
        <source>Downloads</source>
        <translation>下载量</translation>
    </message>
    <message>
        <source>Likes</source>
        <translation>点赞</translation>
    </message>
    <message>
        <source>Licence</source>
        <translation>许可证</translation>
    </message>
    <message>
        <source>Gated</source>
        <translation>需授权</translation>
    </message>
    <message>
        <source>Plan for &amp;VRAM</source>
        <translation>按显存规划(&amp;V)</translation>
    </message>
    <message>
        <source>&amp;RAM</source>
        <translation>内存(&amp;R)</translation>
    </message>
    <message>
        <source>this machine</source>
        <translation>本机</translation>
    </message>
    <message>
        <source>What-if: plan for another machine with this much free memory</source>
        <translation>假设：按另一台拥有这么多可用内存的机器来规划</translation>
    </message>
    <message>
        <source>Quantization</source>
        <translation>量化</translation>
    </message>
    <message>
        <source>Size</source>
        <translation>大小</translation>
    </message>
    <message>
        <source>Fit</source>
        <translation>适配</translation>
    </message>
    <message>
        <source>Context</source>
        <translation>上下文</translation>
    </message>
    <message>
        <source>Memory</source>
        <translation>内存</translation>
    </message>
    <message>
        <source>File</source>
        <translation>文件</translation>
    </message>
    <message>
        <source>Download</source>
        <translation>下载</translation>
    </message>
    <message>
        <source>Installed model</source>
        <translation>已安装的模型</translation>
    </message>
    <message>
        <source>Source</source>
        <translation>来源</translation>
    </message>
    <message>
        <source>Load</source>
        <translation>加载</translation>
    </message>
    <message>
        <source>Switch the chat to this model; the conversation stays open</source>
        <translation>将对话切换到此模型；当前对话保持打开</translation>
    </message>
    <message>
        <source>Verify</source>
        <translation>校验</translation>
    </message>
    <message>
        <source>Delete</source>
        <translation>删除</translation>
    </message>
    <message>
        <source>Load settings…</source>
        <translation>加载设置…</translation>
    </message>
    <message>
        <source>KV cache, flash attention, GPU layers, threads and context for this model&apos;s next load</source>
        <translation>此模型下次加载时的 KV 缓存、Flash Attention、GPU 层数、线程数和上下文</translation>
    </message>
    <message>
        <source>Find models from other apps…</source>
        <translation>查找其他应用的模型…</translation>
    </message>
    <message>
        <source>Use the models Ollama, LM Studio, the Hugging Face cache, GPT4All or Jan downloaded, where they are</source>
        <translation>就地使用 Ollama、LM Studio、Hugging Face 缓存、GPT4All 或 Jan 已下载的模型</translation>
    </message>
    <message>
        <source>Ask the Hub whether the models downloaded from it have new files on main</source>
        <translation>询问 Hub 从它下载的模型在 main 分支上是否有新文件</translation>
    </message>
    <message>
        <source>Update</source>
        <translation>更新</translation>
    </message>
    <message>
        <source>Download the new file, verify it, then switch the model to it and delete the old one</source>
        <translation>下载新文件并校验，然后将模型切换到新文件并删除旧文件</translation>
    </message>
    <message>
        <source>Searching {endpoint}…</source>
        <translation>正在搜索 {endpoint}…</translation>
    </message>
    <message>
        <source>the Hub</source>
        <translation>Hub</translation>
    </message>
    <message>
        <source>the plan changed while checking.</source>
        <translation>检查期间计划已更改。</translation>
    </message>
    <message>
        <source>gated</source>
        <translation>需授权</translation>
    </message>
    <message>
        <source>{n} repositories with GGUF files match “{query}”.</source>
        <translation>有 {n} 个包含 GGUF 文件的仓库与“{query}”匹配。</translation>
    </message>
    <message>
        <source>Nothing matches “{query}”.</source>
        <translation>没有与“{query}”匹配的结果。</translation>
    </message>
    <message>
        <source>Reading the GGUF headers of {repo}…</source>
        <translation>正在读取 {repo} 的 GGUF 文件头…</translation>
    </message>
    <message>
        <source>licence not stated</source>
        <translation>未注明许可证</translation>
    </message>
    <message>
        <source>, gated</source>
        <translation>，需授权</translation>
    </message>
    <message>
        <source>{repo} at {commit} ({licence}{gated}). Planning for {hardware}, {context} tokens.</source>
        <translation>{repo}，提交 {commit}（{licence}{gated}）。按 {hardware}、{context} 个词元的上下文规划。</translation>
    </message>
    <message>
        <source>{gpu} with {free} MiB free</source>
        <translation>{gpu}（可用 {free} MiB）</translation>
    </message>
    <message>
        <source>no GPU ({reason})</source>
        <translation>无 GPU（{reason}）</translation>
    </message>
    <message>
        <source>{gpu} and {ram} MiB of RAM available</source>
        <translation>{gpu}，以及 {ram} MiB 可用内存</translation>
    </message>
    <message>
        <source>This repository has no GGUF models.</source>
        <translation>此仓库中没有 GGUF 模型。</translation>
    </message>
    <message>
        <source>Recommended: {reason}</source>
        <translation>推荐：{reason}</translation>
    </message>
    <message>
        <source>Warning: {text}</source>
        <translation>警告：{text}</translation>
    </message>
    <message>
        <source>Skipped {name}: {why}</source>
        <translation>已跳过 {name}：{why}</translation>
    </message>
    <message>
        <source>{expected} (max {most})</source>
        <translation>{expected}（最多 {most}）</translation>
    </message>
    <message>
        <source>{model} + vision projector {projector}</source>
        <translation>{model} + 视觉投影器 {projector}</translation>
    </message>
    <message>
        <source>A vision model: {file} ({size}) is downloaded, verified and counted in the fit with it.</source>
        <translation>视觉模型：{file}（{size}）会随模型一起下载、校验，并计入适配估算。</translation>
    </message>
    <message>
        <source>Each image takes about {n} tokens of the context.</source>
        <translation>每张图片约占上下文中的 {n} 个 token。</translation>
    </message>
    <message>
        <source>Header unreadable</source>
        <translation>无法读取文件头</translation>
    </message>
    <message>
        <source>★ {verdict} · recommended</source>
        <translation>★ {verdict} · 推荐</translation>
    </message>
    <message>
        <source>Fits on the GPU</source>
        <translation>可完全放入 GPU</translation>
    </message>
    <message>
        <source>Partial: {k}/{n} layers on the GPU, ~{speed} speed</source>
        <translation>部分：{k}/{n} 层在 GPU 上，速度约为 {speed}</translation>
    </message>
    <message>
        <source>Partial: experts in system memory, ~{speed} speed</source>
        <translation>部分：专家在系统内存中，速度约为 {speed}</translation>
    </message>
    <message>
        <source>CPU only</source>
        <translation>仅 CPU</translation>
    </message>
    <message>
        <source>Too large</source>
        <translation>太大</translation>
    </message>
    <message>
        <source>GPU {gpu} + RAM {ram}</source>
        <translation>GPU {gpu} + 内存 {ram}</translation>
    </message>
    <message>
        <source>RAM {ram}</source>
        <translation>内存 {ram}</translation>
    </message>
    <message>
        <source>built in</source>
        <translation>内置</translation>
    </message>
    <message>
        <source>{name} · vision</source>
        <translation>{name} · 视觉</translation>
    </message>
    <message>
        <source>Can see images, with the projector {file}</source>
        <translation>可以看图，使用投影器 {file}</translation>
    </message>
    <message>
        <source>{name} · missing</source>
        <translation>{name} · 文件缺失</translation>
    </message>
    <message>
        <source>Its file is no longer at {path}: the app that keeps it may have moved or deleted it. Put the file back, or remove the model from the library.</source>
        <translation>它的文件已不在 {path}：保存它的应用可能移动或删除了它。请把文件放回原处，或从模型库中移除此模型。</translation>
    </message>
    <message>
        <source>Asking {endpoint} for updates…</source>
        <translation>正在向 {endpoint} 查询更新…</translation>
    </message>
    <message>
        <source>Updating {name} from {repo}; it stays usable until the new file is verified.</source>
        <translation>正在从 {repo} 更新 {name}；在新文件校验完成前它仍可使用。</translation>
    </message>
    <message>
        <source>{name}: {reason}</source>
        <translation>{name}：{reason}</translation>
    </message>
    <message>
        <source>No models from the Hub are installed; there is nothing to check.</source>
        <translation>没有安装来自 Hub 的模型，无需检查。</translation>
    </message>
    <message>
        <source>Updates available for {n} of {checked} models from the Hub.</source>
        <translation>来自 Hub 的 {checked} 个模型中有 {n} 个可以更新。</translation>
    </message>
    <message>
        <source>All {checked} models from the Hub are up to date.</source>
        <translation>来自 Hub 的 {checked} 个模型均为最新。</translation>
    </message>
    <message>
        <source>{n} could not be checked: {errors}</source>
        <translation>{n} 个无法检查：{errors}</translation>
    </message>
    <message>
        <source>The last update check could not check {n} models (details in the tooltip).</source>
        <translation>上次更新检查有 {n} 个模型无法检查（详情见提示）。</translation>
    </message>
    <message>
        <source>Updated {name} to commit {commit}; the old file was deleted.</source>
        <translation>已将 {name} 更新到提交 {commit}；旧文件已删除。</translation>
    </message>
    <message>
        <source>{name} is up to date.</source>
        <translation>{name} 已是最新。</translation>
    </message>
    <message>
        <source>The update of {name} is paused; {name} is unchanged.</source>
        <translation>{name} 的更新已暂停；{name} 未改变。</translation>
    </message>
    <message>
        <source>The update of {name} was cancelled; {name} is unchanged.</source>
        <translation>{name} 的更新已取消；{name} 未改变。</translation>
    </message>
    <message>
        <source>{name} was not updated: {reason} {name} is unchanged and still usable.</source>
        <translation>{name} 未更新：{reason} {name} 未改变，仍可使用。</translation>
    </message>
    <message>
        <source>{name} · update available</source>
        <translation>{name} · 有可用更新</translation>
    </message>
    <message>
        <source>{repo} has new bytes for {file} on main (commit {commit}). Update downloads and verifies them, then switches the model to them.</source>
        <translation>{repo} 的 main 分支上 {file} 有新内容（提交 {commit}）。“更新”会下载并校验它们，然后将模型切换过去。</translation>
    </message>
    <message>
        <source>This model is used from another app&apos;s folder, which Hearth never changes: the update goes into Hearth&apos;s own models folder.</source>
        <translation>此模型使用的是其他应用文件夹中的文件，Hearth 从不修改它：更新会放入 Hearth 自己的模型文件夹。</translation>
    </message>
    <message>
        <source>{name} loads with {settings} from its next turn.</source>
        <translation>{name} 将从下一轮起以 {settings} 加载。</translation>
    </message>
    <message>
        <source>, {partial} in unfinished downloads</source>
        <translation>，另有 {partial} 在未完成的下载中</translation>
    </message>
    <message>
        <source>Models use {used}{partial}; {free} free on this disk.</source>
        <translation>模型占用 {used}{partial}；此磁盘可用 {free}。</translation>
    </message>
    <message>
        <source>Verifying {name} (re-hashing every byte)…</source>
        <translation>正在校验 {name}（重新计算每个字节的哈希）…</translation>
    </message>
    <message>
        <source>Delete {name}? This frees {size}.</source>
        <translation>要删除 {name} 吗？这将释放 {size}。</translation>
    </message>
    <message>
        <source>Could not check for updates: {reason}</source>
        <translation>无法检查更新：{reason}</translation>
    </message>
    <message>
        <source>Checking for updates…</source>
        <translation>正在检查更新…</translation>
    </message>
    <message>
        <source>Check for updates</source>
        <translation>检查更新</translation>
    </message>
    <message>
        <source>Delete model</source>
        <translation>删除模型</translation>
    </message>
    <message>
        <source>Remove model</source>
        <translation>移除模型</translation>
    </message>
    <message>
        <source>Remove</source>
        <translation>移除</translation>
    </message>
    <message>
        <source>Remove {name} from the library? Its file stays where it is, in {folder}.</source>
        <translation>要从模型库中移除 {name} 吗？它的文件会留在原处：{folder}。</translation>
    </message>
    <message>
        <source>Deleting {name}…</source>
        <translation>正在删除 {name}…</translation>
    </message>
    <message>
        <source>{name}: OK, every byte matches the SHA-256 recorded at install.</source>
        <translation>{name}：正常，每个字节都与安装时记录的 SHA-256 一致。</translation>
    </message>
    <message>
        <source>{name} is damaged or missing: its files no longer match the SHA-256 recorded at install. Delete it and download it again.</source>
        <translation>{name} 已损坏或缺失：其文件与安装时记录的 SHA-256 不再一致。请删除后重新下载。</translation>
    </message>
    <message>
        <source>Deleted {name}; freed {size}.</source>
        <translation>已删除 {name}；释放了 {size}。</translation>
    </message>
    <message>
        <source>Removed {name} from the library; its file was outside the models folder.</source>
        <translation>已从模型库中移除 {name}；它的文件位于模型文件夹之外。</translation>
    </message>
    <message>
        <source>Loading {name}…</source>
        <translation>正在加载 {name}…</translation>
    </message>
    <message>
        <source>{name} is loaded.</source>
        <translation>{name} 已加载。</translation>
    </message>
    <message>
        <source>{name} could not be loaded: {detail}</source>
        <translation>无法加载 {name}：{detail}</translation>
    </message>
    <message>
        <source>{name}: memory {report}</source>
        <translation>{name}：内存 {report}</translation>
    </message>
</context>
<context>
    <name>LocalServerDialog</name>
    <message>
        <source>Local API server</source>
        <translation>本地 API 服务器</translation>
    </message>
</context>
<context>
    <name>LocalServerIndicator</name>
    <message numerus="yes">
        <source>API busy (%n)</source>
        <translation>
            <numerusform>API 忙碌（%n）</numerusform>
        </translation>
    </message>
    <message>
        <source>API on</source>
        <translation>API 已开启</translation>
    </message>
    <message>
        <source>API server off</source>
        <translation>API 服务器已关闭</translation>
    </message>
</context>
<context>
    <name>LocalServerPanel</name>
    <message>
        <source>&amp;Serve the loaded model on 127.0.0.1</source>
        <translation>在 127.0.0.1 上提供已加载的模型(&amp;S)</translation>
    </message>
    <message>
        <source>&amp;Port</source>
        <translation>端口(&amp;P)</translation>
    </message>
    <message>
        <source>Address</source>
        <translation>地址</translation>
    </message>
    <message>
        <source>Copy</source>
        <translation>复制</translation>
    </message>
    <message>
        <source>The key was copied.</source>
        <translation>密钥已复制。</translation>
    </message>
    <message>
        <source>Programs on this computer can use the model loaded in Hearth through an OpenAI-compatible API, each with a key of its own. Other computers cannot reach it. Several requests are answered at once, and your chats never wait for them.</source>
        <translation>本机上的程序可以通过兼容 OpenAI 的 API 使用 Hearth 中加载的模型，每个程序使用自己的密钥。其他计算机无法访问。多个请求会同时得到回答，你的聊天从不需要等待它们。</translation>
    </message>
    <message>
        <source>&amp;Replies at once</source>
        <translation>同时回复数(&amp;R)</translation>
    </message>
    <message>
        <source>How many requests from programs the model answers together; more wait their turn. This window&apos;s chats never wait for them. All share the context&apos;s memory. A change loads the model again at the next reply.</source>
        <translation>模型同时回答多少个来自程序的请求；更多的请求排队等候。此窗口中的聊天从不需要等待它们。它们共用上下文的内存。更改后，模型会在下一次回复时重新加载。</translation>
    </message>
    <message>
        <source>API &amp;keys</source>
        <translation>API 密钥(&amp;K)</translation>
    </message>
    <message>
        <source>Name</source>
        <translation>名称</translation>
    </message>
    <message>
        <source>Key</source>
        <translation>密钥</translation>
    </message>
    <message>
        <source>Created</source>
        <translation>创建时间</translation>
    </message>
    <message>
        <source>Last used</source>
        <translation>上次使用</translation>
    </message>
    <message>
        <source>No keys yet: make one for each program that will use the API.</source>
        <translation>还没有密钥：请为每个要使用此 API 的程序创建一个。</translation>
    </message>
    <message>
        <source>&amp;Create key…</source>
        <translation>创建密钥(&amp;C)…</translation>
    </message>
    <message>
        <source>Make a key for a program; it is shown once, to copy</source>
        <translation>为一个程序创建密钥；密钥只显示一次，供你复制</translation>
    </message>
    <message>
        <source>&amp;Revoke…</source>
        <translation>吊销(&amp;R)…</translation>
    </message>
    <message>
        <source>Refuse the selected key from now on</source>
        <translation>从现在起拒绝所选密钥</translation>
    </message>
    <message>
        <source>Done</source>
        <translation>完成</translation>
    </message>
    <message>
        <source>Hide the key; it cannot be shown again</source>
        <translation>隐藏密钥；之后无法再次显示</translation>
    </message>
    <message>
        <source>Create API key</source>
        <translation>创建 API 密钥</translation>
    </message>
    <message>
        <source>A name for the program that will use the key (letters, digits, dots, dashes, underscores):</source>
        <translation>将使用此密钥的程序的名称（字母、数字、点、短横线、下划线）：</translation>
    </message>
    <message>
        <source>Making the key…</source>
        <translation>正在创建密钥…</translation>
    </message>
    <message>
        <source>Programs using the key “{name}” ({prefix}…) will be refused from their next request, and it cannot be brought back. Revoke it?</source>
        <translation>使用密钥“{name}”（{prefix}…）的程序将从下一个请求起被拒绝，且该密钥无法恢复。要吊销它吗？</translation>
    </message>
    <message>
        <source>Revoke API key</source>
        <translation>吊销 API 密钥</translation>
    </message>
    <message>
        <source>Revoke</source>
        <translation>吊销</translation>
    </message>
    <message>
        <source>Revoking the key…</source>
        <translation>正在吊销密钥…</translation>
    </message>
    <message>
        <source>The new key “{name}”: copy it now, it is not shown again.</source>
        <translation>新密钥“{name}”：请立即复制，它不会再次显示。</translation>
    </message>
    <message>
        <source>Session only: the system keyring cannot keep this key, so it stops working when Hearth closes. ({reason})</source>
        <translation>仅限本次会话：系统密钥环无法保存此密钥，因此 Hearth 关闭后它将失效。（{reason}）</translation>
    </message>
    <message>
        <source>Revoked “{name}”: no server accepts it any more.</source>
        <translation>已吊销“{name}”：任何服务器都不再接受它。</translation>
    </message>
    <message>
        <source>Its secret is still in the system keyring: {reason}</source>
        <translation>其密钥内容仍留在系统密钥环中：{reason}</translation>
    </message>
    <message>
        <source>{name} (this session only)</source>
        <translation>{name}（仅限本次会话）</translation>
    </message>
    <message>
        <source>Never</source>
        <translation>从未</translation>
    </message>
    <message>
        <source>Refused for now, because the system keyring did not give their secrets: {names} ({reason})</source>
        <translation>暂被拒绝，因为系统密钥环未提供其密钥内容：{names}（{reason}）</translation>
    </message>
    <message>
        <source>Starting…</source>
        <translation>正在启动…</translation>
    </message>
    <message numerus="yes">
        <source>On: answering %n request(s).</source>
        <translation>
            <numerusform>已开启：正在处理 %n 个请求。</numerusform>
        </translation>
    </message>
    <message>
        <source>On: waiting for requests.</source>
        <translation>已开启：正在等待请求。</translation>
    </message>
    <message>
        <source>Off: {error}</source>
        <translation>已关闭：{error}</translation>
    </message>
    <message>
        <source>Off.</source>
        <translation>已关闭。</translation>
    </message>
    <message>
        <source>The key is kept in the system keyring.</source>
        <translation>密钥保存在系统密钥环中。</translation>
    </message>
</context>
<context>
    <name>MainMenus</name>
    <message>
        <source>&amp;File</source>
        <translation>文件(&amp;F)</translation>
    </message>
    <message>
        <source>&amp;New chat</source>
        <translation>新对话(&amp;N)</translation>
    </message>
    <message>
        <source>&amp;Import chats…</source>
        <translation>导入对话(&amp;I)…</translation>
    </message>
    <message>
        <source>Export chat as &amp;Markdown…</source>
        <translation>将对话导出为 &amp;Markdown…</translation>
    </message>
    <message>
        <source>Export chat as &amp;JSON…</source>
        <translation>将对话导出为 &amp;JSON…</translation>
    </message>
    <message>
        <source>Export all chats as Markdown…</source>
        <translation>将所有对话导出为 Markdown…</translation>
    </message>
    <message>
        <source>Export all chats as JSON…</source>
        <translation>将所有对话导出为 JSON…</translation>
    </message>
    <message>
        <source>&amp;Quit</source>
        <translation>退出(&amp;Q)</translation>
    </message>
    <message>
        <source>&amp;Edit</source>
        <translation>编辑(&amp;E)</translation>
    </message>
    <message>
        <source>&amp;Find in chats</source>
        <translation>在对话中查找(&amp;F)</translation>
    </message>
    <message>
        <source>&amp;View</source>
        <translation>视图(&amp;V)</translation>
    </message>
    <message>
        <source>Chat &amp;settings</source>
        <translation>对话设置(&amp;S)</translation>
    </message>
    <message>
        <source>&amp;Models…</source>
        <translation>模型(&amp;M)…</translation>
    </message>
    <message>
        <source>&amp;Documents…</source>
        <translation>文档(&amp;D)…</translation>
    </message>
    <message>
        <source>Local API &amp;server…</source>
        <translation>本地 API 服务器(&amp;S)…</translation>
    </message>
    <message>
        <source>Se&amp;rvers…</source>
        <translation>服务器(&amp;R)…</translation>
    </message>
    <message>
        <source>T&amp;ools…</source>
        <translation>工具(&amp;O)…</translation>
    </message>
    <message>
        <source>&amp;Theme</source>
        <translation>主题(&amp;T)</translation>
    </message>
    <message>
        <source>Follow the system</source>
        <translation>跟随系统</translation>
    </message>
    <message>
        <source>Light</source>
        <translation>浅色</translation>
    </message>
    <message>
        <source>Dark</source>
        <translation>深色</translation>
    </message>
    <message>
        <source>&amp;Language</source>
        <translation>语言(&amp;L)</translation>
    </message>
</context>
<context>
    <name>MainWindow</name>
    <message>
        <source>Copied</source>
        <translation>已复制</translation>
    </message>
    <message>
        <source>The library cannot take models while the database is read-only.</source>
        <translation>数据库为只读时，模型库无法添加模型。</translation>
    </message>
    <message>
        <source>Models are still being imported; drop these again when it is done.</source>
        <translation>模型仍在导入中；完成后请再次拖放这些文件。</translation>
    </message>
</context>
<context>
    <name>ModelBar</name>
    <message>
        <source>Model</source>
        <translation>模型</translation>
    </message>
    <message>
        <source>Settings</source>
        <translation>设置</translation>
    </message>
    <message>
        <source>This chat&apos;s system prompt and sampling (Ctrl+,)</source>
        <translation>此对话的系统提示词与采样参数（Ctrl+,）</translation>
    </message>
    <message>
        <source>{model} was not loaded automatically: it crashed last time ({error}). Send a message to try it again.</source>
        <translation>未自动加载 {model}：它上次崩溃了（{error}）。发送一条消息即可再次尝试。</translation>
    </message>
    <message>
        <source>{name} · vision</source>
        <translation>{name} · 视觉</translation>
    </message>
    <message>
        <source>Can see images, with the projector {file}</source>
        <translation>可以看图，使用投影器 {file}</translation>
    </message>
    <message>
        <source>Add server…</source>
        <translation>添加服务器…</translation>
    </message>
    <message>
        <source>Manage servers…</source>
        <translation>管理服务器…</translation>
    </message>
    <message>
        <source>No models installed</source>
        <translation>尚未安装模型</translation>
    </message>
    <message>
        <source>Added {server} with {count} models</source>
        <translation>已添加 {server}，共 {count} 个模型</translation>
    </message>
</context>
<context>
    <name>ModelImportDialog</name>
    <message>
        <source>Importing models</source>
        <translation>正在导入模型</translation>
    </message>
    <message>
        <source>Looking for models…</source>
        <translation>正在查找模型…</translation>
    </message>
    <message>
        <source>Cancel</source>
        <translation>取消</translation>
    </message>
    <message>
        <source>{file}: {done} of {total}</source>
        <translation>{file}：{done} / {total}</translation>
    </message>
    <message>
        <source>Done.</source>
        <translation>完成。</translation>
    </message>
    <message>
        <source>Close</source>
        <translation>关闭</translation>
    </message>
</context>
<context>
    <name>ModelImporter</name>
    <message>
        <source>Imported {name}.</source>
        <translation>已导入 {name}。</translation>
    </message>
    <message>
        <source>{file} is already in the library as {name}.</source>
        <translation>{file} 已在模型库中，名为 {name}。</translation>
    </message>
    <message>
        <source>{file} was not imported: {reason}</source>
        <translation>{file} 未导入：{reason}</translation>
    </message>
    <message>
        <source>Nothing to import: no GGUF models among what was dropped.</source>
        <translation>没有可导入的内容：拖放的内容中没有 GGUF 模型。</translation>
    </message>
    <message>
        <source>Cancelled: {file} was not imported, and nothing of it was kept.</source>
        <translation>已取消：{file} 未导入，未保留任何部分。</translation>
    </message>
</context>
<context>
    <name>ModelLoadSettingsDialog</name>
    <message>
        <source>&amp;KV cache type</source>
        <translation>KV 缓存类型(&amp;K)</translation>
    </message>
    <message>
        <source>&amp;Flash attention</source>
        <translation>Flash Attention(&amp;F)</translation>
    </message>
    <message>
        <source>&amp;GPU layers</source>
        <translation>GPU 层数(&amp;G)</translation>
    </message>
    <message>
        <source>&amp;Main GPU</source>
        <translation>主 GPU(&amp;M)</translation>
    </message>
    <message>
        <source>&amp;Tensor split</source>
        <translation>张量拆分(&amp;T)</translation>
    </message>
    <message>
        <source>T&amp;hreads</source>
        <translation>线程数(&amp;H)</translation>
    </message>
    <message>
        <source>Memory &amp;lock</source>
        <translation>锁定内存(&amp;L)</translation>
    </message>
    <message>
        <source>&amp;Context length</source>
        <translation>上下文长度(&amp;C)</translation>
    </message>
    <message>
        <source>&amp;Prompt lookup</source>
        <translation>提示词查找(&amp;P)</translation>
    </message>
    <message>
        <source>&amp;Draft model</source>
        <translation>草稿模型(&amp;D)</translation>
    </message>
    <message>
        <source>Automatic</source>
        <translation>自动</translation>
    </message>
    <message>
        <source>Automatic: f16, or q8_0 when that makes the model fit. A quantized cache takes less memory and needs flash attention.</source>
        <translation>自动：f16；若 q8_0 能让模型放得下则用 q8_0。量化缓存占用更少内存，并需要 Flash Attention。</translation>
    </message>
    <message>
        <source>Auto</source>
        <translation>自动</translation>
    </message>
    <message>
        <source>On</source>
        <translation>开</translation>
    </message>
    <message>
        <source>Off</source>
        <translation>关</translation>
    </message>
    <message>
        <source>Auto: on with a GPU or a quantized KV cache</source>
        <translation>自动：有 GPU 或量化 KV 缓存时开启</translation>
    </message>
    <message>
        <source>Layers on the GPU; 0 runs the model on the CPU only</source>
        <translation>放在 GPU 上的层数；0 表示仅在 CPU 上运行</translation>
    </message>
    <message>
        <source>CPU threads; Automatic: the global setting, else the physical cores</source>
        <translation>CPU 线程数；自动：使用全局设置，否则使用物理核心数</translation>
    </message>
    <message>
        <source>Keep the weights in RAM, never paged out</source>
        <translation>将权重保留在内存中，永不换出</translation>
    </message>
    <message>
        <source>Guess the next words from the conversation</source>
        <translation>根据对话猜测接下来的词</translation>
    </message>
    <message>
        <source>Speculative decoding: words the reply repeats from the conversation (code given back with a change, quotes, names) are checked several at a time, which is faster where a batch costs little more than one token (a GPU, a large model). Guesses shorten or stop when they do not pay. Replies stay the model&apos;s own, up to the rounding of batched arithmetic. Turns flash attention on when it is Auto.</source>
        <translation>推测解码：回复中重复对话内容的词（稍作修改后返回的代码、引文、名称）会一次检查多个，在一批的开销仅略高于一个词元时（GPU、大模型）更快。猜测不划算时会缩短或停止。回复仍是模型自己的，仅受批量运算舍入的影响。闪电注意力为“自动”时会将其打开。</translation>
    </message>
    <message>
        <source>None</source>
        <translation>无</translation>
    </message>
    <message>
        <source>Speculative decoding with a small model of the same family (the same vocabulary): it guesses the next words, and this model checks several at a time, which is faster where a batch costs little more than one token (a GPU, a large model). Replies stay the model&apos;s own, up to the rounding of batched arithmetic. Not with prompt lookup.</source>
        <translation>用同一系列（相同词表）的小模型做推测解码：它猜出接下来的词，由本模型一次核对多个；在一批的开销只比一个词元略多的地方（GPU、大模型）更快。回复仍是本模型自己的，至多有批量运算的舍入差异。不能与提示词查找同时使用。</translation>
    </message>
    <message>
        <source> tokens</source>
        <translation> 个词元</translation>
    </message>
    <message>
        <source>A conversation&apos;s own context length still wins</source>
        <translation>对话自身的上下文长度仍然优先</translation>
    </message>
    <message>
        <source>Automatic (e.g. 3,1: each GPU&apos;s share of the layers)</source>
        <translation>自动（例如 3,1：每块 GPU 分担的层数比例）</translation>
    </message>
    <message>
        <source>Reset to automatic</source>
        <translation>全部恢复为自动</translation>
    </message>
    <message>
        <source>Save</source>
        <translation>保存</translation>
    </message>
    <message>
        <source>The model is loaded with these settings at its next turn</source>
        <translation>模型将在下一轮以这些设置加载</translation>
    </message>
    <message>
        <source>Close</source>
        <translation>关闭</translation>
    </message>
    <message>
        <source>The installed models could not be listed: {error}</source>
        <translation>无法列出已安装的模型：{error}</translation>
    </message>
    <message>
        <source>{name} (not installed)</source>
        <translation>{name}（未安装）</translation>
    </message>
    <message>
        <source>Load settings: {name}</source>
        <translation>加载设置：{name}</translation>
    </message>
    <message>
        <source>How {name} is loaded. Automatic leaves each choice to Hearth.</source>
        <translation>{name} 的加载方式。“自动”表示由 Hearth 决定。</translation>
    </message>
    <message>
        <source>GPU {index} (not found)</source>
        <translation>GPU {index}（未找到）</translation>
    </message>
    <message>
        <source>The GPU that holds the whole model</source>
        <translation>容纳整个模型的 GPU</translation>
    </message>
    <message>
        <source>Each GPU&apos;s share of the layers, in this order: {gpus}</source>
        <translation>每块 GPU 分担的层数比例，顺序为：{gpus}</translation>
    </message>
    <message>
        <source>No GPU was found: {reason}</source>
        <translation>未找到 GPU：{reason}</translation>
    </message>
    <message>
        <source>No GPU was found</source>
        <translation>未找到 GPU</translation>
    </message>
    <message>
        <source>The next load&apos;s plan is shown once these settings can be used.</source>
        <translation>这些设置可用后，将显示下次加载的方案。</translation>
    </message>
    <message>
        <source>Planning the next load…</source>
        <translation>正在规划下次加载…</translation>
    </message>
    <message>
        <source>on</source>
        <translation>开</translation>
    </message>
    <message>
        <source>off</source>
        <translation>关</translation>
    </message>
    <message>
        <source>Next load: {context}-token context, {layers}/{n_layers} layers on the GPU, KV cache {kv}, flash attention {flash}, {threads} threads; predicted {total} (KV cache {kv_bytes}): {fit}.</source>
        <translation>下次加载：{context} 词元上下文，{layers}/{n_layers} 层在 GPU 上，KV 缓存 {kv}，Flash Attention {flash}，{threads} 个线程；预计 {total}（KV 缓存 {kv_bytes}）：{fit}。</translation>
    </message>
    <message>
        <source>fits</source>
        <translation>放得下</translation>
    </message>
    <message>
        <source>may not fit</source>
        <translation>可能放不下</translation>
    </message>
    <message>
        <source> The draft model {name} guesses up to {count} tokens at a time.</source>
        <translation> 草稿模型 {name} 每次最多猜 {count} 个词元。</translation>
    </message>
    <message>
        <source> Prompt lookup guesses up to {count} tokens at a time.</source>
        <translation> 提示词查找每次最多猜测 {count} 个词元。</translation>
    </message>
    <message>
        <source>Why: {reason}</source>
        <translation>原因：{reason}</translation>
    </message>
    <message>
        <source>No plan: {error}</source>
        <translation>无法规划：{error}</translation>
    </message>
    <message>
        <source>Saving…</source>
        <translation>正在保存…</translation>
    </message>
    <message>
        <source>Saved: {name} is loaded with {settings} from its next turn.</source>
        <translation>已保存：{name} 将从下一轮起以 {settings} 加载。</translation>
    </message>
    <message>
        <source>Not saved: {error}</source>
        <translation>未保存：{error}</translation>
    </message>
</context>
<context>
    <name>ModelScanDialog</name>
    <message>
        <source>Models from other apps</source>
        <translation>其他应用的模型</translation>
    </message>
    <message>
        <source>GGUF models that Ollama, LM Studio, the Hugging Face cache, GPT4All, Jan and your own folders keep on this computer. Adding one uses it where it is: nothing is copied, and Hearth never changes or deletes it (removing it from the library only forgets it).</source>
        <translation>Ollama、LM Studio、Hugging Face 缓存、GPT4All、Jan 以及你自己的文件夹在本机保存的 GGUF 模型。添加后就地使用：不复制任何文件，Hearth 也从不修改或删除它们（从模型库中移除只是不再记录）。</translation>
    </message>
    <message>
        <source>Model</source>
        <translation>模型</translation>
    </message>
    <message>
        <source>App</source>
        <translation>应用</translation>
    </message>
    <message>
        <source>Size</source>
        <translation>大小</translation>
    </message>
    <message>
        <source>State</source>
        <translation>状态</translation>
    </message>
    <message>
        <source>Location</source>
        <translation>位置</translation>
    </message>
    <message>
        <source>Scan again</source>
        <translation>重新扫描</translation>
    </message>
    <message>
        <source>Add selected</source>
        <translation>添加所选</translation>
    </message>
    <message>
        <source>Close</source>
        <translation>关闭</translation>
    </message>
    <message>
        <source>Looking in other apps&apos; model folders…</source>
        <translation>正在查找其他应用的模型文件夹…</translation>
    </message>
    <message>
        <source>No GGUF models found in the {n} app folders on this computer.</source>
        <translation>在本机的 {n} 个应用文件夹中没有找到 GGUF 模型。</translation>
    </message>
    <message>
        <source>{found} models found, {new} not in the library yet.</source>
        <translation>找到 {found} 个模型，其中 {new} 个尚未在模型库中。</translation>
    </message>
    <message>
        <source>Your folder</source>
        <translation>你的文件夹</translation>
    </message>
    <message>
        <source>Cannot be used</source>
        <translation>无法使用</translation>
    </message>
    <message>
        <source>In the library as {name}</source>
        <translation>已在模型库中，名为 {name}</translation>
    </message>
    <message>
        <source>, with its vision projector</source>
        <translation>，附带其视觉投影器</translation>
    </message>
    <message>
        <source>New: adds as {name}{vision}</source>
        <translation>新：将添加为 {name}{vision}</translation>
    </message>
    <message>
        <source>Checking the models&apos; SHA-256 (once)…</source>
        <translation>正在校验模型的 SHA-256（仅一次）…</translation>
    </message>
    <message>
        <source>Checking {name}: {done} of {total}…</source>
        <translation>正在校验 {name}：{done} / {total}…</translation>
    </message>
    <message>
        <source>Added {n} models to the library, where they are.</source>
        <translation>已就地将 {n} 个模型添加到模型库。</translation>
    </message>
    <message>
        <source>{name} was not added: {why}</source>
        <translation>{name} 未添加：{why}</translation>
    </message>
</context>
<context>
    <name>Provenance</name>
    <message>
        <source>not recorded</source>
        <translation>未记录</translation>
    </message>
    <message>
        <source>from the model file (GGUF)</source>
        <translation>来自模型文件（GGUF）</translation>
    </message>
    <message>
        <source>fallback {format} (the model&apos;s own template could not be used)</source>
        <translation>后备格式 {format}（无法使用模型自带的模板）</translation>
    </message>
    <message>
        <source>Model</source>
        <translation>模型</translation>
    </message>
    <message>
        <source>Server</source>
        <translation>服务器</translation>
    </message>
    <message>
        <source>Model file</source>
        <translation>模型文件</translation>
    </message>
    <message>
        <source>Quantization</source>
        <translation>量化</translation>
    </message>
    <message>
        <source>SHA-256</source>
        <translation>SHA-256</translation>
    </message>
    <message>
        <source>Chat template</source>
        <translation>对话模板</translation>
    </message>
    <message>
        <source>Sampling</source>
        <translation>采样参数</translation>
    </message>
    <message>
        <source>Seed</source>
        <translation>随机种子</translation>
    </message>
    <message>
        <source>Tokens</source>
        <translation>词元</translation>
    </message>
    <message>
        <source>{prompt} in, {completion} out</source>
        <translation>输入 {prompt}，输出 {completion}</translation>
    </message>
    <message>
        <source>Time to first token</source>
        <translation>首词元用时</translation>
    </message>
    <message>
        <source>Speed</source>
        <translation>速度</translation>
    </message>
    <message>
        <source>Context</source>
        <translation>上下文</translation>
    </message>
    <message>
        <source>Written</source>
        <translation>生成时间</translation>
    </message>
</context>
<context>
    <name>ProvenanceDialog</name>
    <message>
        <source>How this reply was made</source>
        <translation>这条回复是如何生成的</translation>
    </message>
    <message>
        <source>Copy</source>
        <translation>复制</translation>
    </message>
</context>
<context>
    <name>RecommendedList</name>
    <message>
        <source>Recommended models to start with</source>
        <translation>推荐的入门模型</translation>
    </message>
    <message>
        <source>Checking…</source>
        <translation>正在检查…</translation>
    </message>
    <message>
        <source>Check sizes and fit</source>
        <translation>检查大小和适配</translation>
    </message>
    <message>
        <source>Ask the Hub for each suggested file&apos;s size and read its header to see how it fits</source>
        <translation>向 Hub 查询每个建议文件的大小并读取其文件头，以了解是否适配</translation>
    </message>
    <message>
        <source>Model</source>
        <translation>模型</translation>
    </message>
    <message>
        <source>Good for</source>
        <translation>适合</translation>
    </message>
    <message>
        <source>Fit</source>
        <translation>适配</translation>
    </message>
    <message>
        <source>File</source>
        <translation>文件</translation>
    </message>
    <message>
        <source>Licence</source>
        <translation>许可证</translation>
    </message>
    <message>
        <source>The list of recommended models could not be read; search the Hub.</source>
        <translation>无法读取推荐模型列表；请搜索 Hub。</translation>
    </message>
    <message>
        <source>Reading the sizes and GGUF headers of the suggested files from {endpoint}…</source>
        <translation>正在从 {endpoint} 读取建议文件的大小和 GGUF 文件头…</translation>
    </message>
    <message>
        <source>Could not check sizes and fit: {reason} The list is still here; try again later.</source>
        <translation>无法检查大小和适配：{reason} 列表仍在；请稍后重试。</translation>
    </message>
    <message>
        <source>The plan changed; check sizes and fit again to regroup the list.</source>
        <translation>计划已更改；请再次检查大小和适配以重新分组列表。</translation>
    </message>
    <message>
        <source>Checked all {n} suggested files.</source>
        <translation>已检查全部 {n} 个建议文件。</translation>
    </message>
    <message>
        <source>Checked {ok} of {n} suggested files; {failed} could not be checked: {reason}</source>
        <translation>已检查 {n} 个建议文件中的 {ok} 个；{failed} 个无法检查：{reason}</translation>
    </message>
    <message>
        <source>Fits on the GPU</source>
        <translation>可完全放入 GPU</translation>
    </message>
    <message>
        <source>Partly on the GPU</source>
        <translation>部分在 GPU 上</translation>
    </message>
    <message>
        <source>Runs in system memory (CPU only)</source>
        <translation>在系统内存中运行（仅 CPU）</translation>
    </message>
    <message>
        <source>Too large for this machine</source>
        <translation>对本机来说太大</translation>
    </message>
    <message>
        <source>Fit not known</source>
        <translation>适配情况未知</translation>
    </message>
    <message>
        <source>Sizes and fit not checked yet</source>
        <translation>尚未检查大小和适配</translation>
    </message>
    <message>
        <source>{group} ({n})</source>
        <translation>{group}（{n}）</translation>
    </message>
    <message>
        <source>Could not check</source>
        <translation>无法检查</translation>
    </message>
    <message>
        <source>Not checked</source>
        <translation>未检查</translation>
    </message>
    <message>
        <source>{quant} · {size}</source>
        <translation>{quant} · {size}</translation>
    </message>
</context>
<context>
    <name>SafeBrowser</name>
    <message>
        <source>Open link</source>
        <translation>打开链接</translation>
    </message>
    <message>
        <source>Open this link in your web browser?</source>
        <translation>要在网页浏览器中打开此链接吗？</translation>
    </message>
</context>
<context>
    <name>SearchPanel</name>
    <message>
        <source>Search all chats…</source>
        <translation>搜索所有对话…</translation>
    </message>
    <message>
        <source>Type to search titles and messages.</source>
        <translation>输入内容以搜索标题和消息。</translation>
    </message>
    <message>
        <source>Searching…</source>
        <translation>正在搜索…</translation>
    </message>
    <message>
        <source>Nothing found.</source>
        <translation>未找到结果。</translation>
    </message>
    <message numerus="yes">
        <source>%n result(s)</source>
        <translation>
            <numerusform>%n 条结果</numerusform>
        </translation>
    </message>
</context>
<context>
    <name>ServerDialog</name>
    <message>
        <source>Add server</source>
        <translation>添加服务器</translation>
    </message>
    <message>
        <source>e.g. gpu-box</source>
        <translation>例如 gpu-box</translation>
    </message>
    <message>
        <source>optional; kept in the system keyring</source>
        <translation>可选；保存在系统密钥环中</translation>
    </message>
    <message>
        <source>optional, for an internal server&apos;s certificate</source>
        <translation>可选，用于内部服务器的证书</translation>
    </message>
    <message>
        <source>Choose…</source>
        <translation>选择…</translation>
    </message>
    <message>
        <source>Name</source>
        <translation>名称</translation>
    </message>
    <message>
        <source>Address</source>
        <translation>地址</translation>
    </message>
    <message>
        <source>API key</source>
        <translation>API 密钥</translation>
    </message>
    <message>
        <source>CA bundle</source>
        <translation>CA 证书包</translation>
    </message>
    <message>
        <source>Context</source>
        <translation>上下文</translation>
    </message>
    <message>
        <source>Connect and save</source>
        <translation>连接并保存</translation>
    </message>
    <message>
        <source>A server that speaks the OpenAI API: vLLM, TGI, llama.cpp, Ollama…</source>
        <translation>支持 OpenAI API 的服务器：vLLM、TGI、llama.cpp、Ollama…</translation>
    </message>
    <message>
        <source>Connecting to {url}…</source>
        <translation>正在连接 {url}…</translation>
    </message>
    <message>
        <source>automatic: what the server reports, else {tokens}</source>
        <translation>自动：使用服务器报告的值，否则为 {tokens}</translation>
    </message>
    <message>
        <source>The tokens of prompt and reply together that the server&apos;s models take. Attached documents are planned to fit in it: whole when they fit, searched passages when not.</source>
        <translation>服务器的模型可容纳的提示与回复词元总数。附加的文档按此规划：放得下时整篇放入，否则放入检索到的段落。</translation>
    </message>
</context>
<context>
    <name>ServersDialog</name>
    <message>
        <source>Servers</source>
        <translation>服务器</translation>
    </message>
    <message>
        <source>Name</source>
        <translation>名称</translation>
    </message>
    <message>
        <source>Address</source>
        <translation>地址</translation>
    </message>
    <message>
        <source>Models</source>
        <translation>模型</translation>
    </message>
    <message>
        <source>API key</source>
        <translation>API 密钥</translation>
    </message>
    <message>
        <source>CA bundle</source>
        <translation>CA 证书包</translation>
    </message>
    <message>
        <source>Context</source>
        <translation>上下文</translation>
    </message>
    <message>
        <source>No servers yet: add one that speaks the OpenAI API.</source>
        <translation>还没有服务器：请添加一个支持 OpenAI API 的服务器。</translation>
    </message>
    <message>
        <source>&amp;Refresh models</source>
        <translation>刷新模型(&amp;R)</translation>
    </message>
    <message>
        <source>Ask every server for its models again</source>
        <translation>重新向每个服务器获取模型列表</translation>
    </message>
    <message>
        <source>Change &amp;key…</source>
        <translation>更改密钥(&amp;K)…</translation>
    </message>
    <message>
        <source>Remove k&amp;ey</source>
        <translation>移除密钥(&amp;E)</translation>
    </message>
    <message>
        <source>Change &amp;CA bundle…</source>
        <translation>更改 CA 证书包(&amp;C)…</translation>
    </message>
    <message>
        <source>Use the &amp;system&apos;s CAs</source>
        <translation>使用系统的 CA(&amp;S)</translation>
    </message>
    <message>
        <source>Change con&amp;text…</source>
        <translation>更改上下文(&amp;T)…</translation>
    </message>
    <message>
        <source>The context length its models are planned for, when the server does not say or says wrong</source>
        <translation>为其模型规划的上下文长度，用于服务器未报告或报告有误时</translation>
    </message>
    <message>
        <source>Re&amp;move…</source>
        <translation>移除(&amp;M)…</translation>
    </message>
    <message>
        <source>&amp;Add server…</source>
        <translation>添加服务器(&amp;A)…</translation>
    </message>
    <message>
        <source>System</source>
        <translation>系统</translation>
    </message>
    <message>
        <source>The system&apos;s certificate authorities</source>
        <translation>系统的证书颁发机构</translation>
    </message>
    <message>
        <source>Checking…</source>
        <translation>正在检查…</translation>
    </message>
    <message>
        <source>Set for this server</source>
        <translation>为此服务器设置</translation>
    </message>
    <message>
        <source>What the server reports</source>
        <translation>服务器报告的值</translation>
    </message>
    <message>
        <source>Per model</source>
        <translation>按模型</translation>
    </message>
    <message>
        <source>What the server reports for each model</source>
        <translation>服务器为每个模型报告的值</translation>
    </message>
    <message>
        <source>The server does not report its context length: {tokens} is assumed</source>
        <translation>服务器未报告其上下文长度：假定为 {tokens}</translation>
    </message>
    <message>
        <source>…</source>
        <translation>…</translation>
    </message>
    <message>
        <source>None</source>
        <translation>无</translation>
    </message>
    <message>
        <source>Unknown</source>
        <translation>未知</translation>
    </message>
    <message>
        <source>Keyring</source>
        <translation>密钥环</translation>
    </message>
    <message>
        <source>This session only</source>
        <translation>仅限本次会话</translation>
    </message>
    <message>
        <source>The API key is kept in the system keyring ({backend}).</source>
        <translation>API 密钥保存在系统密钥环中（{backend}）。</translation>
    </message>
    <message>
        <source>The API key is kept for this session only: {reason}</source>
        <translation>API 密钥仅在本次会话中保留：{reason}</translation>
    </message>
    <message>
        <source>Remove the API key for “{server}” from the system keyring? Hearth then calls it without a key.</source>
        <translation>要从系统密钥环中移除“{server}”的 API 密钥吗？之后 Hearth 将不带密钥访问它。</translation>
    </message>
    <message>
        <source>Remove key</source>
        <translation>移除密钥</translation>
    </message>
    <message>
        <source>CA bundle for {server}</source>
        <translation>{server} 的 CA 证书包</translation>
    </message>
    <message>
        <source>Remove the server “{server}” and its API key? Chats with its models keep their replies and still say which server wrote them.</source>
        <translation>要移除服务器“{server}”及其 API 密钥吗？使用其模型的对话会保留回复，并仍会注明回复来自哪个服务器。</translation>
    </message>
    <message>
        <source>Remove server</source>
        <translation>移除服务器</translation>
    </message>
    <message>
        <source>Remove</source>
        <translation>移除</translation>
    </message>
    <message>
        <source>Saving…</source>
        <translation>正在保存…</translation>
    </message>
    <message>
        <source>Removed {server} and its API key.</source>
        <translation>已移除 {server} 及其 API 密钥。</translation>
    </message>
    <message>
        <source>Removed {server}, but not its API key: {reason}</source>
        <translation>已移除 {server}，但未能移除其 API 密钥：{reason}</translation>
    </message>
    <message>
        <source>Removed the API key for {server}.</source>
        <translation>已移除 {server} 的 API 密钥。</translation>
    </message>
    <message>
        <source>The API key for {server} could not be removed: {reason}</source>
        <translation>无法移除 {server} 的 API 密钥：{reason}</translation>
    </message>
    <message>
        <source>Saved the new API key for {server} in the system keyring.</source>
        <translation>已将 {server} 的新 API 密钥保存到系统密钥环中。</translation>
    </message>
    <message>
        <source>Using the new API key for {server} for this session only: {reason}</source>
        <translation>{server} 的新 API 密钥仅在本次会话中使用：{reason}</translation>
    </message>
    <message>
        <source>{server} is checked against the system&apos;s CAs.</source>
        <translation>{server} 使用系统的 CA 进行校验。</translation>
    </message>
    <message>
        <source>{server} is checked against the CAs in {path}.</source>
        <translation>{server} 使用 {path} 中的 CA 进行校验。</translation>
    </message>
    <message>
        <source>{server}&apos;s models are planned for the context it reports, else {tokens} tokens.</source>
        <translation>{server} 的模型按其报告的上下文规划，否则为 {tokens} 个词元。</translation>
    </message>
    <message>
        <source>{server}&apos;s models are planned for {tokens} tokens.</source>
        <translation>{server} 的模型按 {tokens} 个词元规划。</translation>
    </message>
</context>
<context>
    <name>ServersPanel</name>
    <message>
        <source>API key refused</source>
        <translation>API 密钥被拒绝</translation>
    </message>
    <message>
        <source>certificate not trusted</source>
        <translation>证书不受信任</translation>
    </message>
    <message>
        <source>not answering</source>
        <translation>无响应</translation>
    </message>
    <message>
        <source>not reachable</source>
        <translation>无法连接</translation>
    </message>
    <message>
        <source>cannot list its models</source>
        <translation>无法列出其模型</translation>
    </message>
</context>
<context>
    <name>SettingsDialog</name>
    <message>
        <source>Hearth settings</source>
        <translation>Hearth 设置</translation>
    </message>
    <message>
        <source>Models &amp;&amp; Hub</source>
        <translation>模型与 Hub</translation>
    </message>
</context>
<context>
    <name>SettingsPanel</name>
    <message>
        <source>Chat settings</source>
        <translation>对话设置</translation>
    </message>
    <message>
        <source>Preset</source>
        <translation>预设</translation>
    </message>
    <message>
        <source>Apply</source>
        <translation>应用</translation>
    </message>
    <message>
        <source>Save as preset…</source>
        <translation>另存为预设…</translation>
    </message>
    <message>
        <source>Delete preset</source>
        <translation>删除预设</translation>
    </message>
    <message>
        <source>System prompt</source>
        <translation>系统提示词</translation>
    </message>
    <message>
        <source>Optional: how the model should behave in this chat</source>
        <translation>可选：模型在此对话中应如何表现</translation>
    </message>
    <message>
        <source>Temperature</source>
        <translation>温度</translation>
    </message>
    <message>
        <source>Top-p</source>
        <translation>Top-p</translation>
    </message>
    <message>
        <source>Top-k</source>
        <translation>Top-k</translation>
    </message>
    <message>
        <source>Min-p</source>
        <translation>Min-p</translation>
    </message>
    <message>
        <source>Repeat penalty</source>
        <translation>重复惩罚</translation>
    </message>
    <message>
        <source>Seed</source>
        <translation>随机种子</translation>
    </message>
    <message>
        <source>Max tokens</source>
        <translation>最大词元数</translation>
    </message>
    <message>
        <source>Context length</source>
        <translation>上下文长度</translation>
    </message>
    <message>
        <source>When full</source>
        <translation>上下文满时</translation>
    </message>
    <message>
        <source>Thinking</source>
        <translation>思考过程</translation>
    </message>
    <message>
        <source>Random</source>
        <translation>随机</translation>
    </message>
    <message>
        <source>Leave out the oldest turns</source>
        <translation>省略最早的轮次</translation>
    </message>
    <message>
        <source>Refuse to send</source>
        <translation>拒绝发送</translation>
    </message>
    <message>
        <source>For every chat: the system prompt is always kept, and the reply says what was left out</source>
        <translation>适用于所有对话：始终保留系统提示词，回复中会说明省略了哪些内容</translation>
    </message>
    <message>
        <source>Collapsed</source>
        <translation>折叠</translation>
    </message>
    <message>
        <source>Expanded</source>
        <translation>展开</translation>
    </message>
    <message>
        <source>Hidden</source>
        <translation>隐藏</translation>
    </message>
    <message>
        <source>For every chat: how a reasoning model&apos;s thinking is first shown above its answer</source>
        <translation>适用于所有对话：推理模型的思考过程在回答上方最初如何显示</translation>
    </message>
    <message>
        <source>Send PDF pages as pictures to models that can see</source>
        <translation>将 PDF 页面以图片形式发送给能看图的模型</translation>
    </message>
    <message>
        <source>For every chat: an attached PDF&apos;s first {n} pages also go as pictures to a vision model, for charts, scans and forms; each page takes hundreds of tokens of the context</source>
        <translation>对所有聊天：附加的 PDF 的前 {n} 页也会以图片形式发送给视觉模型，适合图表、扫描件和表单；每页约占上下文中数百个 token</translation>
    </message>
    <message>
        <source>A new context length applies when the model is next loaded.</source>
        <translation>新的上下文长度将在下次加载模型时生效。</translation>
    </message>
    <message>
        <source>Use for this model</source>
        <translation>用作此模型的默认设置</translation>
    </message>
    <message>
        <source>New chats with this model start from these settings</source>
        <translation>使用此模型的新对话将以这些设置开始</translation>
    </message>
    <message>
        <source>Reset</source>
        <translation>重置</translation>
    </message>
    <message>
        <source>Go back to this model&apos;s defaults</source>
        <translation>恢复为此模型的默认设置</translation>
    </message>
    <message>
        <source>Save preset</source>
        <translation>保存预设</translation>
    </message>
    <message>
        <source>Preset name:</source>
        <translation>预设名称：</translation>
    </message>
</context>
<context>
    <name>Sidebar</name>
    <message>
        <source>New chat</source>
        <translation>新对话</translation>
    </message>
    <message>
        <source>Search</source>
        <translation>搜索</translation>
    </message>
    <message>
        <source>Search all chats (Ctrl+F)</source>
        <translation>搜索所有对话（Ctrl+F）</translation>
    </message>
    <message>
        <source>Rename</source>
        <translation>重命名</translation>
    </message>
    <message>
        <source>Delete</source>
        <translation>删除</translation>
    </message>
    <message>
        <source>Rename…</source>
        <translation>重命名…</translation>
    </message>
    <message>
        <source>Unpin</source>
        <translation>取消置顶</translation>
    </message>
    <message>
        <source>Pin to the top</source>
        <translation>置顶</translation>
    </message>
    <message>
        <source>Export as Markdown…</source>
        <translation>导出为 Markdown…</translation>
    </message>
    <message>
        <source>Export as JSON…</source>
        <translation>导出为 JSON…</translation>
    </message>
    <message>
        <source>Rename chat</source>
        <translation>重命名对话</translation>
    </message>
    <message>
        <source>New name:</source>
        <translation>新名称：</translation>
    </message>
    <message>
        <source>Pin</source>
        <translation>置顶</translation>
    </message>
    <message>
        <source>Stop the reply before deleting this chat.</source>
        <translation>请先停止回复，再删除此对话。</translation>
    </message>
</context>
<context>
    <name>StatusLine</name>
    <message>
        <source>no GPU found</source>
        <translation>未找到 GPU</translation>
    </message>
    <message>
        <source>No GPU: {reason}</source>
        <translation>无 GPU：{reason}</translation>
    </message>
    <message>
        <source>VRAM {used} GiB used · {free} GiB free</source>
        <translation>显存已用 {used} GiB · 可用 {free} GiB</translation>
    </message>
    <message>
        <source>GPU {index}: {name}, {used} of {total} GiB used (driver {driver}{cuda})</source>
        <translation>GPU {index}：{name}，已用 {used} / {total} GiB（驱动 {driver}{cuda}）</translation>
    </message>
    <message>
        <source>All GPUs: {total} GiB</source>
        <translation>全部 GPU：{total} GiB</translation>
    </message>
    <message>
        <source>Last reply: TTFT {ttft} s · {rate} tok/s</source>
        <translation>上次回复：首词元 {ttft} 秒 · {rate} 词元/秒</translation>
    </message>
</context>
<context>
    <name>ToolApprovalCard</name>
    <message>
        <source>The model wants to run {tool} on {server}. Allow it?</source>
        <translation>模型想在 {server} 上运行 {tool}。允许吗？</translation>
    </message>
    <message>
        <source>Allow once</source>
        <translation>允许一次</translation>
    </message>
    <message>
        <source>Allow in this chat</source>
        <translation>在此对话中允许</translation>
    </message>
    <message>
        <source>Run this tool without asking for the rest of this conversation</source>
        <translation>在此对话的其余部分运行此工具时不再询问</translation>
    </message>
    <message>
        <source>Deny</source>
        <translation>拒绝</translation>
    </message>
</context>
<context>
    <name>ToolsDialog</name>
    <message>
        <source>Give the command that starts the server, or its address.</source>
        <translation>请给出启动服务器的命令，或它的地址。</translation>
    </message>
    <message>
        <source>Added {name}.</source>
        <translation>已添加 {name}。</translation>
    </message>
    <message>
        <source>Added {name}; its secrets are kept for this session only: {reason}</source>
        <translation>已添加 {name}；它的密钥仅在本次会话中保留：{reason}</translation>
    </message>
    <message>
        <source>Imported {names}.</source>
        <translation>已导入 {names}。</translation>
    </message>
    <message>
        <source>No servers were imported from {path}.</source>
        <translation>未从 {path} 导入任何服务器。</translation>
    </message>
    <message>
        <source>Skipped {name}: {why}</source>
        <translation>已跳过 {name}：{why}</translation>
    </message>
    <message>
        <source>Their secrets are kept for this session only: {reason}</source>
        <translation>它们的密钥仅在本次会话中保留：{reason}</translation>
    </message>
    <message>
        <source>Remove the tool server “{name}” and the secrets kept for it in the keyring? Chats that used its tools keep their calls and results.</source>
        <translation>要移除工具服务器“{name}”以及密钥环中为它保存的密钥吗？使用过其工具的对话会保留调用和结果。</translation>
    </message>
    <message>
        <source>Remove tool server</source>
        <translation>移除工具服务器</translation>
    </message>
    <message>
        <source>Removed {name}.</source>
        <translation>已移除 {name}。</translation>
    </message>
    <message>
        <source>Saving…</source>
        <translation>正在保存…</translation>
    </message>
    <message>
        <source>Another file…</source>
        <translation>其他文件…</translation>
    </message>
    <message>
        <source>Import MCP servers</source>
        <translation>导入 MCP 服务器</translation>
    </message>
    <message>
        <source>Starting the tool servers…</source>
        <translation>正在启动工具服务器…</translation>
    </message>
    <message>
        <source>Off</source>
        <translation>已关闭</translation>
    </message>
    <message>
        <source>Not started</source>
        <translation>未启动</translation>
    </message>
    <message>
        <source>Failed</source>
        <translation>失败</translation>
    </message>
    <message>
        <source>{count} tools</source>
        <translation>{count} 个工具</translation>
    </message>
    <message>
        <source>No environment variables or headers for the next server.</source>
        <translation>下一个服务器没有环境变量或请求头。</translation>
    </message>
    <message>
        <source>The next server gets {names} (values kept in the keyring).</source>
        <translation>下一个服务器将获得 {names}（值保存在密钥环中）。</translation>
    </message>
    <message>
        <source>Turn on</source>
        <translation>开启</translation>
    </message>
    <message>
        <source>Turn off</source>
        <translation>关闭</translation>
    </message>
    <message>
        <source>Tool servers (MCP)</source>
        <translation>工具服务器（MCP）</translation>
    </message>
    <message>
        <source>Server or tool</source>
        <translation>服务器或工具</translation>
    </message>
    <message>
        <source>State</source>
        <translation>状态</translation>
    </message>
    <message>
        <source>Details</source>
        <translation>详情</translation>
    </message>
    <message>
        <source>Name</source>
        <translation>名称</translation>
    </message>
    <message>
        <source>Command that starts it (npx -y …, uvx …), or its https:// address</source>
        <translation>启动它的命令（npx -y …、uvx …），或它的 https:// 地址</translation>
    </message>
    <message>
        <source>Add</source>
        <translation>添加</translation>
    </message>
    <message>
        <source>Remove</source>
        <translation>移除</translation>
    </message>
    <message>
        <source>variable or header</source>
        <translation>变量或请求头</translation>
    </message>
    <message>
        <source>Variable or header name (API_KEY, Authorization)</source>
        <translation>变量或请求头名称（API_KEY、Authorization）</translation>
    </message>
    <message>
        <source>Its value (hidden, kept in the keyring)</source>
        <translation>它的值（隐藏，保存在密钥环中）</translation>
    </message>
    <message>
        <source>Add variable</source>
        <translation>添加变量</translation>
    </message>
    <message>
        <source>An environment variable for a command, or a header for an address, for the next server added</source>
        <translation>为下一个添加的服务器设置：命令的环境变量，或地址的请求头</translation>
    </message>
    <message>
        <source>Clear</source>
        <translation>清除</translation>
    </message>
    <message>
        <source>Import</source>
        <translation>导入</translation>
    </message>
    <message>
        <source>Add the MCP servers another app knows</source>
        <translation>添加其他应用已有的 MCP 服务器</translation>
    </message>
    <message>
        <source>Start and list tools</source>
        <translation>启动并列出工具</translation>
    </message>
    <message>
        <source>Start the servers that are on and ask each for its tools</source>
        <translation>启动已开启的服务器，并向每个服务器询问其工具</translation>
    </message>
</context>
<context>
    <name>ToolsPicker</name>
    <message>
        <source>No tool servers yet</source>
        <translation>还没有工具服务器</translation>
    </message>
    <message>
        <source>{name} (turned off)</source>
        <translation>{name}（已关闭）</translation>
    </message>
    <message>
        <source>{name} (removed)</source>
        <translation>{name}（已移除）</translation>
    </message>
    <message>
        <source>Manage tool servers…</source>
        <translation>管理工具服务器…</translation>
    </message>
    <message>
        <source>Tools ({count})</source>
        <translation>工具（{count}）</translation>
    </message>
    <message>
        <source>Tools</source>
        <translation>工具</translation>
    </message>
    <message>
        <source>Choose the tool servers (MCP) whose tools the model may call; each call is asked about</source>
        <translation>选择模型可以调用其工具的工具服务器（MCP）；每次调用都会先询问</translation>
    </message>
</context>
<context>
    <name>Transcript</name>
    <message>
        <source>You</source>
        <translation>你</translation>
    </message>
    <message>
        <source>Hearth</source>
        <translation>Hearth</translation>
    </message>
    <message>
        <source>System</source>
        <translation>系统</translation>
    </message>
    <message>
        <source>Tool</source>
        <translation>工具</translation>
    </message>
    <message>
        <source>Writing…</source>
        <translation>正在生成…</translation>
    </message>
    <message>
        <source>Stopped</source>
        <translation>已停止</translation>
    </message>
    <message>
        <source>Error</source>
        <translation>出错</translation>
    </message>
    <message>
        <source>Interrupted: Hearth closed before this reply finished</source>
        <translation>已中断：Hearth 在这条回复完成前关闭了</translation>
    </message>
    <message>
        <source>Copy</source>
        <translation>复制</translation>
    </message>
    <message>
        <source>Edit</source>
        <translation>编辑</translation>
    </message>
    <message>
        <source>Regenerate</source>
        <translation>重新生成</translation>
    </message>
    <message>
        <source>Delete</source>
        <translation>删除</translation>
    </message>
    <message>
        <source>Info</source>
        <translation>详情</translation>
    </message>
    <message>
        <source>Previous version</source>
        <translation>上一个版本</translation>
    </message>
    <message>
        <source>Next version</source>
        <translation>下一个版本</translation>
    </message>
    <message>
        <source>Copy as Markdown</source>
        <translation>复制为 Markdown</translation>
    </message>
    <message>
        <source>Edit this message (the current version is kept)</source>
        <translation>编辑这条消息（当前版本会保留）</translation>
    </message>
    <message>
        <source>Write another reply (this one is kept)</source>
        <translation>再生成一条回复（这一条会保留）</translation>
    </message>
    <message>
        <source>Delete this message and what follows it</source>
        <translation>删除这条消息及其后的内容</translation>
    </message>
    <message>
        <source>How this reply was made</source>
        <translation>这条回复是如何生成的</translation>
    </message>
    <message>
        <source>Called {tool}</source>
        <translation>调用了 {tool}</translation>
    </message>
    <message>
        <source>{tool} returned</source>
        <translation>{tool} 返回</translation>
    </message>
    <message>
        <source>{tool} failed</source>
        <translation>{tool} 失败</translation>
    </message>
    <message>
        <source>TTFT {seconds} s</source>
        <translation>首词元 {seconds} 秒</translation>
    </message>
    <message>
        <source>{rate} tok/s</source>
        <translation>{rate} 词元/秒</translation>
    </message>
    <message>
        <source>{count} tokens in</source>
        <translation>输入 {count} 个词元</translation>
    </message>
    <message>
        <source>{count} tokens out</source>
        <translation>输出 {count} 个词元</translation>
    </message>
    <message>
        <source>Thinking… {seconds} s</source>
        <translation>正在思考… {seconds} 秒</translation>
    </message>
    <message>
        <source>Thinking</source>
        <translation>思考过程</translation>
    </message>
    <message>
        <source>Thought for {seconds} s</source>
        <translation>已思考 {seconds} 秒</translation>
    </message>
    <message>
        <source>Context: {note}</source>
        <translation>上下文：{note}</translation>
    </message>
    <message>
        <source>Copied</source>
        <translation>已复制</translation>
    </message>
    <message>
        <source>Hide thinking</source>
        <translation>隐藏思考过程</translation>
    </message>
    <message>
        <source>Show thinking</source>
        <translation>显示思考过程</translation>
    </message>
    <message>
        <source>Show tool details</source>
        <translation>显示工具详情</translation>
    </message>
    <message>
        <source>Hide tool details</source>
        <translation>隐藏工具详情</translation>
    </message>
    <message>
        <source>Sources ({count})</source>
        <translation>来源（{count}）</translation>
    </message>
</context>
<context>
    <name>UndoBar</name>
    <message>
        <source>Undo</source>
        <translation>撤销</translation>
    </message>
    <message>
        <source>Chat “{title}” deleted ({seconds} s)</source>
        <translation>已删除对话“{title}”（{seconds} 秒）</translation>
    </message>
</context>
</TS>
