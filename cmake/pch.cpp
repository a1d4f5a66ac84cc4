// Anchor translation unit for the precompiled-header target.
