; Inno Setup 6 script: Hearth-Setup-<version>.exe, a per-user install that needs no administrator rights.
;
;   pyinstaller --noconfirm --distpath dist --workpath build\pyinstaller packaging\hearth.spec
;   iscc /DAppVersion=0.1.0 packaging\windows\hearth.iss
;
; Input: the PyInstaller bundle dist\Hearth\ (Hearth.exe without a console, hearth-cli.exe for the
; terminal, _internal\). Output: dist\Hearth-Setup-<version>.exe. .github/workflows/installers.yml builds
; it, installs it silently, runs the smoke test from the installed copy and uninstalls it.
;
; Installs to %LOCALAPPDATA%\Programs\Hearth with a Start-menu entry and an uninstaller (Settings > Apps).
; Conversations, settings and models live in %LOCALAPPDATA%\Hearth and survive an uninstall or upgrade.

#ifndef AppVersion
  #error Pass the version from pyproject.toml: iscc /DAppVersion=X.Y.Z packaging\windows\hearth.iss
#endif
#ifndef SourceDir
  #define SourceDir "..\..\dist\Hearth"
#endif
#ifndef OutputDir
  #define OutputDir "..\..\dist"
#endif

[Setup]
; Never change AppId: upgrades and the uninstaller find an existing installation by it.
AppId={{BFB8C9F5-639D-4E71-B44F-B558CDEEC4D5}
AppName=Hearth
AppVersion={#AppVersion}
AppVerName=Hearth {#AppVersion}
AppPublisher=Hearth
AppComments=Private desktop chat with local language models
VersionInfoVersion={#AppVersion}
; Per user, no elevation prompt: {autopf} is %LOCALAPPDATA%\Programs and {autoprograms} the user's Start menu.
PrivilegesRequired=lowest
DefaultDirName={autopf}\Hearth
DefaultGroupName=Hearth
DisableProgramGroupPage=yes
DisableDirPage=auto
ArchitecturesAllowed=x64compatible
ArchitecturesInstallIn64BitMode=x64compatible
MinVersion=10.0
OutputDir={#OutputDir}
OutputBaseFilename=Hearth-Setup-{#AppVersion}
SetupIconFile=..\icons\hearth.ico
UninstallDisplayIcon={app}\Hearth.exe
UninstallDisplayName=Hearth
WizardStyle=modern
; The bundle is ~300 MB, most of it the starter model and Qt; lzma2 solid compression halves it.
Compression=lzma2/max
SolidCompression=yes
LZMANumBlockThreads=4
; A running Hearth (or its model runner, the same exe) would keep DLLs locked during an upgrade.
CloseApplications=yes
RestartApplications=no

[Languages]
Name: "english"; MessagesFile: "compiler:Default.isl"

[Tasks]
Name: "desktopicon"; Description: "{cm:CreateDesktopIcon}"; GroupDescription: "{cm:AdditionalIcons}"; Flags: unchecked

[InstallDelete]
; An upgrade replaces the whole bundle; libraries of the previous version must not linger next to the new ones.
Type: filesandordirs; Name: "{app}\_internal"

[Files]
Source: "{#SourceDir}\*"; DestDir: "{app}"; Flags: ignoreversion recursesubdirs createallsubdirs

[Icons]
Name: "{autoprograms}\Hearth"; Filename: "{app}\Hearth.exe"; Comment: "Chat with local language models"
Name: "{autodesktop}\Hearth"; Filename: "{app}\Hearth.exe"; Tasks: desktopicon

[Run]
Filename: "{app}\Hearth.exe"; Description: "{cm:LaunchProgram,Hearth}"; Flags: nowait postinstall skipifsilent
